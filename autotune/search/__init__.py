"""Search: Optuna studies over the training knobs (``python -m autotune run``)."""

from autotune.search.budget import default_budget, parse_bytes
from autotune.search.knobs import Knob, SearchSpace, apply_values, get_value
from autotune.search.space import list_spaces, load_space

__all__ = [
    "Knob",
    "SearchSpace",
    "apply_values",
    "default_budget",
    "get_value",
    "list_spaces",
    "load_space",
    "parse_bytes",
]
