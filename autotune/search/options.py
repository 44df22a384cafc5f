"""What one study needs (:class:`StudyOptions`), and what every run of it gets from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig
from autotune.redact import StorageURL
from autotune.search.converge import FREE_TRIALS
from autotune.search.knobs import SearchSpace
from autotune.search.storage import GRACE_PERIOD
from autotune.train.compile_cache import FOLDER as CACHE_FOLDER
from autotune.train.compile_cache import cache_env
from autotune.train.memcap import BUDGET_ENV


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
    memory_cap: bool = False
    """Every run of the study runs under ``memory_budget`` (:mod:`autotune.train.memcap`): capped on
    CUDA, its peak checked on a CPU; a run over it fails as out of memory. False: the budget is a
    constraint on the measured peak only."""
    memory_budget_origin: str = ""
    """Where ``memory_budget`` comes from when neither a flag nor the device gives it (``the
    cgroup's limit``, :mod:`autotune.memlimit`); empty otherwise."""
    sampler: str = "tpe"
    seed: int = 0
    storage: StorageURL | None = None
    """The study's database (None: the run folder's journal); it shows only redacted."""
    study_name: str = ""
    guidance: bool = True
    references: tuple[tuple[str, TrainConfig], ...] = ()
    """Configurations measured as trials of their own right after the stock one (``--reference``)."""
    stage_trials: int = 4
    prune: bool = True
    profile_steps: int = 3
    time_budget_s: float | None = None
    """This run's tuning time: no trial starts when the time left is shorter than a typical trial of
    the study (the median of those finished), and a trial still running at the end is stopped
    (``reason: budget``) and queued again, for the same command to measure when it continues the
    study. A run's first trial is never stopped: each run measures at least one."""
    grace_period_s: int = GRACE_PERIOD
    """With a database: a running trial whose heartbeat is older than this is failed and queued
    again by any worker (its worker died); heartbeats go every quarter of it."""
    confirm_rounds: int = 2
    """Rounds of stock and the best measured again at the end (``autotune.search.confirm``; 0: none)."""
    converge_after: int = FREE_TRIALS
    """Free trials that found nothing within noise of the best before the study stops (0: never)."""
    machine: str = ""
    """What measures (:attr:`autotune.config.compat.Machine.name`): a study continues only on its kind."""
    data: dict[str, Any] | None = None
    """Which data the study trains on (:class:`autotune.search.data_echo.DataEcho`), for run.json."""
    plateau: bool = False
    """Also stop on a plateau (:func:`autotune.search.converge.plateau`): for a study left to end by
    itself (no ``--trials``, no ``--time-budget``); off with ``converge_after`` 0."""


def run_env(opts: StudyOptions) -> dict[str, str]:
    """The environment every run of the study gets beside the tuner's: the study's compile cache
    and its memory cap, or none (empty) where it has none: a cap left in the tuner's own
    environment is not the study's."""
    env = cache_env(opts.out / CACHE_FOLDER)
    env[BUDGET_ENV] = str(opts.memory_budget) if opts.memory_cap else ""
    return env


def cap_of(opts: StudyOptions) -> int | None:
    """The memory cap every run of the study runs under (None: none)."""
    return opts.memory_budget if opts.memory_cap else None
