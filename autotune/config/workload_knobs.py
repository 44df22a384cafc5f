"""Knobs a workload declares for its own model (GR00T's ``model.*``), looked up by workload name.

A workload's package declares them as one dataclass of :func:`autotune.config.knob.knob` fields
and registers it here; the ``model`` mapping of a configuration is then parsed with the generic
``freeze``/``unfreeze`` and that workload's knobs, strictly, in the same YAML. A workload named
``module:Class`` declares none (its module is not imported to read a configuration).
"""

from __future__ import annotations

import importlib

_KNOBS: dict[str, type] = {}


def register_model_knobs(workload: str, cls: type) -> None:
    """Declare ``cls`` (a dataclass of knob fields) as the model knobs of ``workload``."""
    _KNOBS[workload] = cls


def _load_builtin() -> None:
    # The built-in workloads register their knobs when their package is imported; the
    # configuration layer finds them by name, as a plugin lookup, without depending on them.
    importlib.import_module("autotune.workloads")


def model_knobs_of(workload: str) -> type | None:
    """The model-knob dataclass of ``workload``; None when it declares none."""
    if workload not in _KNOBS and ":" not in workload:
        _load_builtin()
    return _KNOBS.get(workload)


def all_model_knobs() -> dict[str, type]:
    """Every registered workload's model-knob dataclass, by workload name."""
    _load_builtin()
    return dict(_KNOBS)
