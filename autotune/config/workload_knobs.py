"""Knobs a workload declares for its own model (GR00T's ``model.*``), looked up by workload name.

A workload declares them as one dataclass of :func:`autotune.config.knob.knob` fields (its
``model_knobs`` class attribute), registered here by name when the workload is registered; the
``model`` mapping of a configuration is then parsed with the generic ``freeze``/``unfreeze`` and
that workload's knobs, strictly, in the same YAML. A workload named ``module:Class`` is not
imported to read a configuration: its model keys are read as the registered knobs that declare
them all (a subclass of a built-in workload has its parent's), and checked against the class
once the session imports it.
"""

from __future__ import annotations

import importlib

_KNOBS: dict[str, type] = {}


def register_model_knobs(workload: str, cls: type) -> None:
    """Declare ``cls`` (a dataclass of knob fields) as the model knobs of ``workload``."""
    _KNOBS[workload] = cls


def registered() -> list[str]:
    """The names of the registered workloads, built-in and installed ones (entry points)."""
    return importlib.import_module("autotune.workloads").list_workloads()


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


def knobs_declaring(keys: list[str]) -> type | None:
    """The first registered model-knob dataclass that declares every one of ``keys``."""
    import dataclasses

    for cls in all_model_knobs().values():
        if set(keys) <= {f.name for f in dataclasses.fields(cls)}:
            return cls
    return None
