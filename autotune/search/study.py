"""One tuning study: Optuna's ask-and-tell loop over trials run in fresh processes.

Each trial samples the space's knobs, applies them to the base (stock) configuration, refuses
impossible combinations with ``check_compatible`` and runs the rest through
:func:`autotune.train.launch.launch` (own process group, own temporary folder, hard timeout).
The objective is the measured samples/s, maximised; peak memory is a constraint against the
memory budget (``user_attrs["constraint"]`` = (peak - budget) / budget, feasible when <= 0),
handed to the sampler with ``trial.set_constraint("memory", ...)`` (Optuna 5's replacement of
``constraints_func``; TPE and GP use it, and the winner is chosen among feasible trials here).

How a trial ends:

* measured: COMPLETE with its samples/s (over the budget: COMPLETE but infeasible);
* out of memory: COMPLETE with value 0 and constraint 1, so the sampler learns that the region
  is infeasible (a FAIL trial would teach it nothing); ``reason`` is ``oom``;
* refused configuration, crash, timeout, NaN loss, compile error: FAIL with
  ``user_attrs["reason"]`` and ``["error"]``; the study goes on.

Pruning clearly worse trials from their first step times is not done yet: every trial runs all
its steps.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import TrainConfig
from autotune.config.compat import Machine, check_compatible
from autotune.errors import ConfigError
from autotune.search.space import SearchSpace, apply_values
from autotune.train.launch import launch

SAMPLERS = ("tpe", "gp", "random")


@dataclass
class StudyOptions:
    """Everything one study needs; built by ``autotune.search.cli`` from the command line."""

    base: TrainConfig
    space: SearchSpace
    out: Path
    trials: int
    steps: int
    warmup: int
    nproc: int
    timeout_per_trial: float
    memory_budget: int
    sampler: str = "tpe"
    seed: int = 0
    storage: str | None = None
    study_name: str = ""


def constraint_of(trial: FrozenTrial) -> list[float]:
    """The trial's constraint values: feasible when every value is <= 0."""
    return [float(trial.user_attrs.get("constraint", 0.0))]


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (joint over the knobs, conditional knobs grouped), GP or random; all read ``set_constraint``."""
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate and group are "experimental" since 2.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=5)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=5)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"--sampler: {name!r} is not one of {list(SAMPLERS)}")


def open_study(opts: StudyOptions) -> optuna.Study:
    """Create the study, or load it to continue (same name, same storage)."""
    storage: Any = opts.storage
    if storage is None:
        opts.out.mkdir(parents=True, exist_ok=True)
        backend = optuna.storages.journal.JournalFileBackend(str(opts.out / "study.journal"))
        storage = optuna.storages.JournalStorage(backend)
    return optuna.create_study(study_name=opts.study_name, storage=storage, direction="maximize",
                               sampler=make_sampler(opts.sampler, opts.seed), load_if_exists=True)


def sample(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Config values of the active knobs, sampled in order (a ``when`` sees the knobs before it)."""
    values: dict[str, Any] = {}
    for knob in space.knobs:
        if not knob.active(values):
            continue
        if knob.type == "int":
            param = trial.suggest_int(knob.key, int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log)
        elif knob.type == "float":
            param = trial.suggest_float(knob.key, knob.low, knob.high, step=knob.step, log=knob.log)
        else:
            param = trial.suggest_categorical(knob.key, [knob.encode(c) for c in knob.choices])
        values[knob.key] = knob.decode(param)
    return values


def trial_config(base: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """``base`` with the knob values applied; per-region precisions equal to the default are left out."""
    cfg = apply_values(base, values)
    cfg.precision.regions = {r: p for r, p in cfg.precision.regions.items() if p != cfg.precision.default}
    return cfg


def config_of(opts: StudyOptions, trial: FrozenTrial) -> TrainConfig:
    """The configuration a finished trial ran (rebuilt from its parameters)."""
    by_key = {k.key: k for k in opts.space.knobs}
    values = {key: by_key[key].decode(p) if key in by_key else p for key, p in trial.params.items()}
    return trial_config(opts.base, values)


def _fail(trial: optuna.Trial, reason: str, error: str) -> tuple[TrialState, float | None]:
    trial.set_user_attr("reason", reason)
    trial.set_user_attr("error", error[:2000])
    return TrialState.FAIL, None


def run_trial(trial: optuna.Trial, opts: StudyOptions, machine: Machine, regions: tuple[str, ...]) -> tuple[TrialState, float | None]:
    """Sample, check and measure one trial; its state and value for ``study.tell``."""
    try:
        cfg = trial_config(opts.base, sample(trial, opts.space))
        check_compatible(cfg, machine, regions)
    except ConfigError as exc:
        return _fail(trial, "config", str(exc))
    log = opts.out / "logs" / f"trial-{trial.number:04d}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    result = launch(cfg, steps=opts.steps, warmup=opts.warmup, nproc=opts.nproc, timeout=opts.timeout_per_trial,
                    log_path=log)
    if "error" in result:
        if result.get("reason") == "oom":
            trial.set_user_attr("constraint", 1.0)
            trial.set_constraint("memory", 1.0)
            _fail(trial, "oom", str(result["error"]))
            return TrialState.COMPLETE, 0.0
        return _fail(trial, str(result.get("reason", "error")), str(result["error"]))
    peak = int(result["peak_memory_bytes"])
    attrs = {
        "samples_per_s": float(result["samples_per_s"]),
        "step_time_ms": float(result["step_time_ms"]),
        "peak_memory_bytes": peak,
        "mfu": float(result.get("mfu", 0.0)),
        "world_size": int(result.get("world_size", opts.nproc)),
        "environment": json.dumps(result.get("environment", {})),
        "constraint": (peak - opts.memory_budget) / opts.memory_budget,
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    trial.set_constraint("memory", attrs["constraint"])
    return TrialState.COMPLETE, attrs["samples_per_s"]


def feasible(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.COMPLETE and "reason" not in trial.user_attrs and constraint_of(trial)[0] <= 0


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The fastest feasible trial (chosen here, so that the random sampler obeys the budget too)."""
    ok = [t for t in study.get_trials(deepcopy=False) if feasible(t)]
    return max(ok, key=lambda t: t.value) if ok else None


def stock_trial(study: optuna.Study) -> FrozenTrial | None:
    return next((t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("stock")), None)


def finished(study: optuna.Study) -> int:
    return sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))


def run_study(opts: StudyOptions, machine: Machine, regions: tuple[str, ...], report: Callable[[str], None] = print) -> optuna.Study:
    """Run trials until the study holds ``opts.trials`` finished ones; returns the study."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = open_study(opts)
    if opts.storage is None:  # our own file: a RUNNING trial is left over from an interrupted run
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(t.number, state=TrialState.FAIL)
    if not study.get_trials(deepcopy=False):
        study.enqueue_trial(opts.space.stock_params(opts.base), user_attrs={"stock": True})
    done = finished(study)
    todo = max(0, opts.trials - done)
    if done:
        report(f"continuing study {opts.study_name!r}: {done} trials done, {todo} to go")
    start = time.monotonic()
    for i in range(todo):
        trial = study.ask()
        state, value = run_trial(trial, opts, machine, regions)
        study.tell(trial, value, state=state) if state == TrialState.COMPLETE else study.tell(trial, state=state)
        report(progress_line(study, study.trials[trial.number], done + i + 1, opts.trials, start, i + 1, todo))
    return study


def progress_line(study: optuna.Study, trial: FrozenTrial, index: int, total: int, start: float, ran: int, todo: int) -> str:
    """``trial 3/8 #2: 12.31 samples/s | best 12.31 (#2, 1.21x stock) | 0:45 elapsed, ~1:30 left``."""
    if "reason" in trial.user_attrs:
        what = f"failed ({trial.user_attrs['reason']}): {str(trial.user_attrs.get('error', ''))[:80]}"
    else:
        what = f"{trial.value:.2f} samples/s" + ("" if feasible(trial) else " (over the memory budget)")
    if trial.user_attrs.get("stock"):
        what += " [stock]"
    best, stock = best_trial(study), stock_trial(study)
    inc = "no feasible trial yet"
    if best is not None:
        inc = f"best {best.value:.2f} (#{best.number}"
        if stock is not None and feasible(stock) and stock.value:
            inc += f", {best.value / stock.value:.2f}x stock"
        inc += ")"
    elapsed = time.monotonic() - start
    left = elapsed / ran * (todo - ran)
    return f"trial {index}/{total} #{trial.number}: {what} | {inc} | {_clock(elapsed)} elapsed, ~{_clock(left)} left"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
