"""Workloads by name.

Built-in workloads register themselves on import. A user registers their own job either in
code (``register_workload(MyWorkload())``) or, to use it from the command line, by naming it as
``path/to/file.py:ClassName`` or ``package.module:ClassName`` (imported and instantiated on first
use; a relative file or a module of the current folder resolves from the current folder, as
``python -m`` would, and the trial processes started there import it the same way) or through the
``autotune.workloads`` entry-point group of an installed package.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from autotune.config.workload_knobs import register_model_knobs
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
    if workload.model_knobs is not None:
        register_model_knobs(workload.name, workload.model_knobs)
    return workload


def _load_entry_points() -> None:
    for ep in entry_points(group="autotune.workloads"):
        if ep.name not in _REGISTRY:
            obj = ep.load()
            register_workload(_instance(obj, f"entry point {ep.name!r} ({ep.value})"))


def _instance(obj: object, what: str) -> Workload:
    """``obj`` as a workload: a Workload instance as is, a Workload subclass instantiated. Anything
    else is refused before it is called: a name from a configuration file is data, and calling an
    arbitrary class (``subprocess:Popen``) would run it."""
    if isinstance(obj, Workload):
        return obj
    if isinstance(obj, type) and issubclass(obj, Workload):
        missing = sorted(getattr(obj, "__abstractmethods__", ()))
        if missing:  # Python's own error is a traceback at obj()
            raise WorkloadError(
                f"{what} does not define {', '.join(missing)}; a Workload implements every abstract "
                "method of autotune.workloads.Workload (see its docstring)"
            )
        return obj()
    kind = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
    raise WorkloadError(
        f"{what} is {kind}, not a subclass of autotune.workloads.Workload (nor an instance of one)"
    )


def _load_module(source: str) -> ModuleType:
    """The module of ``path/to/file.py`` (its folder put on the path, so that spawned loader workers
    import it by name too) or of ``package.module`` (the current folder on the path, as ``python -m``
    has it)."""
    if source.endswith(".py") or os.sep in source:
        path = Path(source).resolve()
        if not path.is_file():
            what = "is not a file" if path.exists() else "no such file"  # a folder, a pipe
            raise ImportError(f"{path}: {what}")
        folder, source = str(path.parent), path.stem
    else:
        folder, path = os.getcwd(), None
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = importlib.import_module(source)
    found = getattr(module, "__file__", None)
    if path is not None and (found is None or Path(found).resolve() != path):
        # imported by its name: a module of that name imported first (Python's json, another
        # workload's file of the same name) is what that name gives, not this file
        raise ImportError(
            f"{path}: its module name {source!r} is taken by {found or 'a built-in module'}; "
            "rename the file"
        )
    return module


def absolute_spec(spec: str) -> str:
    """``spec`` that names the same workload from any folder: ``path/to/file.py:Class`` with its
    file resolved from the current folder (a name or ``package.module:Class`` is left as it is)."""
    source, sep, attr = spec.rpartition(":")
    if not sep or not (source.endswith(".py") or os.sep in source):
        return spec
    return f"{Path(source).resolve()}:{attr}"


def _import_spec(spec: str) -> Workload:
    source, _, attr = spec.rpartition(":")
    try:
        is_file = source.endswith(".py") or os.sep in source
        # an empty or relative module name: importlib's own errors for them are tracebacks
        if not source or not attr or (source.startswith(".") and not is_file):
            raise ImportError("a module (or file) and a class are both needed")
        obj = getattr(_load_module(source), attr)
    # ValueError: a path with a NUL byte (a name read from a configuration file)
    except (ImportError, AttributeError, SyntaxError, ValueError) as exc:
        raise WorkloadError(
            f"workload {spec!r} cannot be imported: {exc}; give path/to/file.py:Class or "
            "package.module:Class"
        ) from None
    except Exception as exc:  # the module's own code failed as it ran (a NameError, a RuntimeError)
        raise WorkloadError(
            f"workload {spec!r} cannot be imported: its module raised {type(exc).__name__}: {exc}"
            f"{_where(exc)} (rerun with --debug for the traceback)"
        ) from exc
    workload = _instance(obj, f"workload {spec!r}: {attr}")
    register_workload(workload, replace=True)
    _REGISTRY[spec] = workload
    return workload


def _where(exc: BaseException) -> str:
    """`` at FILE:LINE``: the line of the module's code that raised ``exc``."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def list_workloads() -> list[str]:
    _load_entry_points()
    return sorted(_REGISTRY)


def get_workload(name: str) -> Workload:
    """The workload registered as ``name``; an unknown name lists the known ones."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return _import_spec(name)
    if name.endswith(".py"):
        raise WorkloadError(f"workload {name!r}: name the class too, as {name}:ClassName")
    _load_entry_points()
    if name not in _REGISTRY:
        raise WorkloadError(
            f"workload {name!r} is unknown; known workloads: {sorted(_REGISTRY)} (or give package.module:Class)"
        )
    return _REGISTRY[name]
