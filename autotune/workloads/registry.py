"""Workloads by name.

Built-in workloads register themselves on import. A user registers their own job either in
code (``register_workload(MyWorkload())``) or, to use it from the command line, by naming it as
``package.module:ClassName`` (imported and instantiated on first use) or through the
``autotune.workloads`` entry-point group of an installed package.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from autotune.errors import WorkloadError
from autotune.workloads.base import Workload

_REGISTRY: dict[str, Workload] = {}


def register_workload(workload: Workload, *, replace: bool = False) -> Workload:
    """Make ``workload`` available under ``workload.name``."""
    if not isinstance(workload, Workload):
        raise WorkloadError(f"{workload!r} does not implement autotune.workloads.Workload")
    if workload.name in _REGISTRY and not replace and _REGISTRY[workload.name] is not workload:
        raise WorkloadError(f"a workload named {workload.name!r} is already registered")
    _REGISTRY[workload.name] = workload
    return workload


def _load_entry_points() -> None:
    for ep in entry_points(group="autotune.workloads"):
        if ep.name not in _REGISTRY:
            obj = ep.load()
            register_workload(obj() if isinstance(obj, type) else obj)


def _import_spec(spec: str) -> Workload:
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise WorkloadError(f"workload {spec!r} cannot be imported: {exc}") from None
    workload = obj() if isinstance(obj, type) else obj
    register_workload(workload, replace=True)
    _REGISTRY[spec] = workload
    return workload


def list_workloads() -> list[str]:
    _load_entry_points()
    return sorted(_REGISTRY)


def get_workload(name: str) -> Workload:
    """The workload registered as ``name``; an unknown name lists the known ones."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return _import_spec(name)
    _load_entry_points()
    if name not in _REGISTRY:
        raise WorkloadError(f"workload {name!r} is unknown; known workloads: {sorted(_REGISTRY)} (or give package.module:Class)")
    return _REGISTRY[name]
