"""The settings a study's measurements depend on, kept in the study and checked when it continues.

Every trial of a study is the base configuration (stock, or ``--base``) with knob values applied,
measured for ``--warmup`` + ``--steps`` steps on ``--nproc`` processes; the speed-ups compare
trials with each other and with the stock trial. A study continued with another batch size,
``--synthetic``, an edited ``--base`` or another window would pair the old trials' speeds with
configurations they were not measured with (``best.yaml`` with batch 8 and a speed measured at 2),
so it is refused with one line naming the setting, its stored and its new value. So is a study
continued on another kind of machine (a run folder carried from an H200 to an A100): its trials'
speeds would be compared with speeds of another chip.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.config import to_dict
from autotune.errors import ConfigError
from autotune.search.trials import WORKER
from autotune.train.trial.record import loads_attr

KEY = "measuring_settings"
"""The study's user attribute holding :func:`settings` of the run that created it (JSON)."""
MACHINE = "machine"
"""The settings' key naming the kind of machine that measured (a GPU's or CPU's model)."""

FLAGS = {
    "base.batch_size": "--batch-size",
    "base.data.source": "--synthetic",
    "base.workload": "--workload",
    "base.preset": "--preset",
    "steps": "--steps",
    "warmup": "--warmup",
    "nproc": "--nproc",
}
"""How a setting is named to the user: the flag that sets it, else the base configuration's key."""


SPACE = "space"
"""The settings' key holding each knob's distribution (:func:`space_of`)."""
_DISTRIBUTION = ("type", "low", "high", "log", "step", "choices", "when")
"""What a knob's trials were drawn from; its group, remedy and notes guide the search only."""


def settings(opts) -> dict[str, Any]:
    """What the study's measurements depend on (``opts`` a :class:`StudyOptions`)."""
    base = to_dict(opts.base)
    base.pop("provenance", None)  # where the base came from, not what it trains
    found = {"base": base, "steps": opts.steps, "warmup": opts.warmup, "nproc": opts.nproc}
    found[SPACE] = space_of(opts.space)
    return found | ({MACHINE: opts.machine} if opts.machine else {})


def space_of(space) -> dict[str, Any]:
    """Each knob of ``space`` (a :class:`SearchSpace`) and its distribution, as JSON keeps them: an
    edited copy of a space under the same name (the printed space, edited) is another space, whose
    trials the study's would be mixed with (a knob removed fails its stock trial's configuration)."""
    knobs = {k.key: {f: getattr(k, f) for f in _DISTRIBUTION} for k in space.knobs}
    return json.loads(json.dumps(knobs, sort_keys=True))


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def record(study: optuna.Study, opts) -> None:
    """Store the settings of the run creating ``study``."""
    study.set_user_attr(KEY, json.dumps(settings(opts), sort_keys=True))


MEASURED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def check_unchanged(study: optuna.Study, opts, running: Sequence[FrozenTrial] = ()) -> None:
    """Refuse to continue ``study`` under settings other than those it was created with, once a
    trial has been measured under them or is being measured (``running``: the trials other workers
    run now); before that (every trial stopped or failed) the new settings replace them. A study
    from before the settings were recorded continues as it is."""
    stored = study.user_attrs.get(KEY)
    if not isinstance(stored, str):
        return
    measured = study.get_trials(deepcopy=False, states=MEASURED)
    if not measured and not running:
        record(study, opts)
        return
    if measured:
        how = "was measured"
    else:  # a worker that started first measures its stock trial under them now
        worker = running[0].user_attrs.get(WORKER, "another worker")
        how = f"is being measured (trial #{running[0].number} on {worker})"
    where = f"study {study.study_name!r}: user_attrs.{KEY}"
    kept = loads_attr(stored, where, "the JSON object of the settings a study was measured with")
    current = json.loads(json.dumps(settings(opts)))
    old, new = _flat(kept), _flat(current)
    if MACHINE in old and old[MACHINE] != new.get(MACHINE):
        raise ConfigError(
            f"{opts.out}: study {study.study_name!r} {how} on {old[MACHINE]!r}, this machine is "
            f"{new.get(MACHINE)!r}; continue it on the kind of machine it was measured on, or give "
            "another --out for a new study"
        )
    old.pop(MACHINE, None)  # a study from before the machine was recorded continues on any
    new.pop(MACHINE, None)
    old = {k: v for k, v in old.items() if not k.startswith(f"{SPACE}.")}
    new = {k: v for k, v in new.items() if not k.startswith(f"{SPACE}.")}
    for key in sorted(old.keys() | new.keys(), key=lambda k: (k not in FLAGS, k)):
        if old.get(key) != new.get(key):
            name = FLAGS.get(key) or f"the base configuration's {key.removeprefix('base.')}"
            raise ConfigError(
                f"{opts.out}: study {study.study_name!r} {how} with {name} {old.get(key)!r}, this "
                f"command gives {new.get(key)!r}; continue it with the same setting, or give another --out "
                "for a new study"
            )
    # after the flags, which also shape the space (--synthetic drops the loader's knobs)
    if SPACE in kept:
        _check_space(kept[SPACE], current[SPACE], study, opts, how)


def _check_space(
    old: dict[str, Any], new: dict[str, Any], study: optuna.Study, opts, how: str
) -> None:
    """Refuse a space whose knobs or distributions differ from those the study's trials were drawn from."""
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) == new.get(key):
            continue
        if key not in new or key not in old:
            change = "removed" if key not in new else "added"
        else:
            field = next(f for f in _DISTRIBUTION if old[key].get(f) != new[key].get(f))
            change = f"{field} {old[key].get(field)!r} then, {new[key].get(field)!r} now"
        raise ConfigError(
            f"{opts.space.path}: knobs.{key}: {change}, but study {study.study_name!r} {how} with "
            f"its space as it was; continue it with that space, or give another --out (or another "
            "name:) for a new study"
        )
