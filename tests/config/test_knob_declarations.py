"""Every knob is declared once, with all that is said of it: a field that is not is a failure here.

The walk covers the generic configuration tree and the model knobs of every built-in workload; a
field added without :func:`autotune.config.knob.knob` (so with no Hugging Face mapping, group or
allowed values) fails :func:`test_every_field_is_a_declared_knob`.
"""

from __future__ import annotations

import copy
import dataclasses
import typing

import pytest

from autotune.config import TrainConfig
from autotune.config.knob import GROUPS, Carried, NotCarried, spec_of
from autotune.config.training import NOT_KNOBS, ModelConfig
from autotune.config.workload_knobs import all_model_knobs
from autotune.export import declared_knobs, trainer_arguments


def leaves(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field]]:
    """The leaf fields of a configuration dataclass tree, dotted."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        if cls is TrainConfig and f.name in NOT_KNOBS or cls is ModelConfig and f.name == "options":
            continue
        if dataclasses.is_dataclass(hints[f.name]) and spec_of(f) is None:
            out += leaves(hints[f.name], key)
        else:
            out.append((key, f))
    return out


TREES = {"generic": TrainConfig, **{f"model of {w}": c for w, c in all_model_knobs().items()}}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_field_is_a_declared_knob(tree):
    cls = TREES[tree]
    unclassified = [key for key, f in leaves(cls) if spec_of(f) is None]
    assert not unclassified, f"fields that are not declared knobs (use knob()): {unclassified}"
    for key, f in leaves(cls):
        spec = spec_of(f)
        assert spec.group is None or spec.group in GROUPS, key
        assert isinstance(spec.hf, (Carried, NotCarried)) or callable(spec.hf), key
        if isinstance(spec.hf, NotCarried):
            assert spec.hf.reason, key


def test_every_builtin_workload_declares_its_model_knobs():
    assert "gr00t_n16" in all_model_knobs()


def test_a_changed_knob_is_either_carried_or_listed_as_not_carried():
    """Each declared knob, moved off its default, changes the export: a field or a not_carried line."""
    cfg = TrainConfig(workload="gr00t_n16", preset="tiny")
    cfg.compile.regions = ["all"]  # compile.mode means something only for a compiled model
    base = trainer_arguments(cfg)
    for d in declared_knobs(cfg):
        others = [c for c in d.spec.choices if c != d.default] or [_another_value(d)]
        exports = []
        for other in (o for o in others if o is not None):
            changed = copy.deepcopy(cfg)
            _set(changed, d.key, other)
            exports.append(trainer_arguments(changed))
        assert not exports or any(
            e.training_arguments != base.training_arguments or d.key in e.not_carried
            for e in exports
        ), d.key


def _another_value(d):
    spec = d.spec
    if spec.choices:
        return next((c for c in spec.choices if c != d.default), None)
    if isinstance(d.default, bool):
        return not d.default
    if isinstance(d.default, list) and d.key.endswith("betas"):
        return [0.8, 0.99]
    if isinstance(d.default, (list, dict)) or d.key in ("data.source", "data.dataset"):
        return {"dit": "fp32"} if isinstance(d.default, dict) else ["dit"]
    if d.default is None:
        return 2 if spec.integer else None
    if isinstance(d.default, (int, float)):
        return type(d.default)(d.default * 2 if d.default else 1)
    return None


def _set(cfg, key, value):
    *parents, leaf = key.split(".")
    obj = cfg
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, leaf, value)
