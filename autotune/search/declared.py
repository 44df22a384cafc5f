"""Search-space entries made from the knobs' declarations (:mod:`autotune.config.knob`).

A space file names a knob and, where it chooses, narrows it (choices, a range, a remedy); the
rest of the entry (type, group, what it requires, the default range) comes from the knob's
declaration. The auto space is made of the declared entries alone.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from autotune.config import TrainConfig
from autotune.config.knob import Declared, walk
from autotune.config.workload_knobs import all_model_knobs, model_knobs_of

MOST_CORES = 16
"""The ceiling of a range declared up to the cores (``high="cores"``): a space file is read for no
machine in particular, so such a knob named alone there searches up to it (its ``cores`` remedy is
still resolved per machine)."""

GROUP_ALIASES = {"comm": "ddp"}
"""Group names of older space files, read as the declared group of the same knobs."""


@cache
def _generic() -> dict[str, Declared]:
    return {d.key: d for d in walk(TrainConfig)}


def _model(workload: str | None) -> dict[str, Declared]:
    classes = [model_knobs_of(workload)] if workload else list(all_model_knobs().values())
    return {d.key: d for cls in classes if cls is not None for d in walk(cls, "model")}


def declared(key: str, workload: str | None = None) -> Declared | None:
    """The declaration of a space key (``precision.regions.vision`` is one of ``precision.regions``;
    a ``@variant`` is its key's), looking in ``workload``'s model knobs (None: any workload's)."""
    key = key.partition("@")[0]
    table = {**_generic(), **_model(workload)}
    while key and key not in table:
        key = key.rpartition(".")[0]
    return table.get(key)


def requirement(d: Declared) -> str | None:
    """What the knob needs to be searched: its search's ``needs``, else CUDA where some value needs it."""
    if d.spec.search is not None and d.spec.search.needs:
        return d.spec.search.needs
    return "cuda" if any(n.what == "cuda" for n in d.spec.needs) else None


def entry(d: Declared) -> dict[str, Any]:
    """The space-file entry of a declared knob's default search (conditions as declared)."""
    s = d.spec.search
    assert s is not None, d.key
    out: dict[str, Any] = {"type": s.type, "group": d.spec.group}
    if s.type in ("int", "float"):
        out.update(low=s.low, high=s.high)
        if s.log:
            out["log"] = True
    elif s.type == "categorical":
        out["choices"] = list(s.choices)
    if s.when:
        out["when"] = dict(s.when)
    if requirement(d):
        out["requires"] = requirement(d)
    if s.remedy is not None:
        out["remedy"] = s.remedy
    if s.remedy_several_ranks is not None:
        out["remedy_several_ranks"] = s.remedy_several_ranks
    if s.doc:
        out["doc"] = s.doc
    return out


def defaults_for(key: str, given: dict[str, Any]) -> dict[str, Any]:
    """What a space file's entry ``given`` for ``key`` leaves to the declaration: its group and
    requirement always, and the declared range, conditions and remedy where the file gives no
    type of its own (a file that gives a type gives its range with it)."""
    d = declared(key)
    if d is None or d.spec.group is None:
        return {}
    out: dict[str, Any] = {"group": d.spec.group}
    if requirement(d):
        out["requires"] = requirement(d)
    search = d.spec.search
    if search is not None and given.get("type", search.type) == search.type and "type" not in given:
        full = entry(d)
        full.pop("when", None)  # conditions are the space's own: its knobs may differ
        if full.get("high") == "cores":
            full["high"] = MOST_CORES
        out.update(full)
    return out
