"""The parts of a report: plain dataclasses, each built from one file or one trial of the run.

The ``from_dict`` / ``read`` constructors are where the raw JSON of the run folder stops: they keep
the fields the page shows, tolerate absent ones (older or unfinished runs) and ignore unknown ones.
"""

from __future__ import annotations

import os
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.errors import short_repr
from autotune.report import folder
from autotune.search.noise import flags
from autotune.search.trials import (
    GROUP,
    NOISY,
    REFERENCE,
    STAGE,
    constraint_of,
    measured,
    measurement_of,
    parity_passed,
    parity_pending,
    parity_undecided,
    reason_of,
    record_of,
)
from autotune.search.vet import changes_numerics


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def relative(path: str | os.PathLike | None, run_dir: Path) -> str | None:
    """A path the run recorded, as the page links it: relative to the run folder where it lies inside it.

    A relative ``path`` is already relative to the run folder (the study records its folders so); an
    absolute one outside the folder stays absolute.
    """
    if not path:
        return None
    p = Path(path)
    if p.is_absolute():
        try:
            return p.resolve().relative_to(run_dir.resolve()).as_posix()
        except ValueError:
            return str(p)
    return p.as_posix()


def in_run(path: Path, run_dir: Path) -> str:
    """A file found under ``run_dir`` (``run_dir / ...``), relative to the run folder.

    Not :func:`relative`: with a relative run folder (``runs/x``) such a path is relative to the current
    folder, not to the run folder, and the page's links are made from the run folder.
    """
    return path.relative_to(run_dir).as_posix()


@dataclass
class RunInfo:
    """run.json: how the tuner was started (every field optional: older runs have no run.json)."""

    study_name: str | None = None
    storage: str | None = None
    """None: the journal file study.journal in the run folder."""
    workload: str | None = None
    preset: str | None = None
    space: str | None = None
    nproc: int | None = None
    trials: int | None = None
    steps: int | None = None
    warmup: int | None = None
    batch_size: int | None = None
    data: dict[str, Any] | None = None
    """Which data the study trained on (:class:`autotune.search.data_echo.DataEcho`'s fields)."""
    memory_budget_bytes: int | None = None
    sampler: str | None = None
    seed: int | None = None
    started_at: str | None = None
    finished_at: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], notes: list[str]) -> RunInfo:
        return cls(**typed(cls, data, "run.json", notes))


def typed(cls: type, data: dict[str, Any], source: str, notes: list[str]) -> dict[str, Any]:
    """The fields of ``cls`` in ``data`` that hold a value of their declared type (a file of the
    run folder is data: a value of another type would end the page); each other one is left out,
    with a note naming ``source``."""
    hints = typing.get_type_hints(cls)
    known = _known(cls, data)
    for key in [k for k, v in known.items() if v is not None and not _of_type(v, hints[k])]:
        value = short_repr(known.pop(key))
        notes.append(f"{source}: {key} is {value}, not {_type_name(hints[key])}; left out")
    return known


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if typing.get_args(hint) else hint.__name__


def _of_type(value: Any, hint: Any) -> bool:
    """``value`` is of the type ``hint``: a class, ``X | None``, ``list[X]``, ``dict[K, V]``, ``Any``
    (a bool is no number; an int is a float)."""
    if hint is Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_of_type(value, h) for h in args)
    if hint is type(None):
        return value is None
    kind = origin or hint
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    if not isinstance(value, kind):
        return False
    if kind is list and args:
        return all(_of_type(v, args[0]) for v in value)
    if kind is dict and args:
        return all(_of_type(k, args[0]) and _of_type(v, args[1]) for k, v in value.items())
    return True


@dataclass
class Parity:
    """Loss parity of the best configuration against stock (autotune.train.window.verify)."""

    passed: bool
    tolerance: float | None = None
    loss_rel_diff: float | None = None
    grad_norm_rel_diff: float | None = None
    steps: int | None = None
    reference: str | None = None
    """Whose losses the best's were compared with (:func:`autotune.search.vet.parity_reference`):
    stock's, stock's without the memory cap, or the first exact configuration that fits."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str, notes: list[str]) -> Parity | None:
        """None where ``data`` has no verdict (``passed``: true or false)."""
        ref = data.get("reference")
        data = {**data, "reference": ref.get("text") if isinstance(ref, dict) else ref}
        known = typed(cls, data, source, notes)
        return cls(**known) if known.get("passed") is not None else None


@dataclass
class Stage:
    """One link of the diagnosis chain: bottleneck -> knob group -> measured gain."""

    stage: int
    incumbent: int | None = None
    incumbent_samples_per_s: float | None = None
    profile: str | None = None
    """The incumbent's profiling folder, relative to the run folder."""
    buckets: dict[str, float] | None = None
    dominant: str | None = None
    bottleneck: str | None = None
    """The bucket the stage acted on; None for a free stage over all knobs."""
    share: float | None = None
    groups: list[str] | None = None
    knobs: list[str] | None = None
    kind: str | None = None
    """``remedy`` (one trial at the group's remedy values), ``search`` or ``free``."""
    loader_bound: bool = False
    """The incumbent's loader set its measured rate: the data stage came first (``share`` its wait)."""
    loader_short: list[float] | None = None
    """The loader's remedies joined a ``remedies`` stage: [its sustained rate, the compute ceiling]."""
    trials: list[int] | None = None
    best_trial: int | None = None
    best_samples_per_s: float | None = None
    gain: float | None = None
    """Best samples/s of the stage over the incumbent's (1.2 = 20 % faster)."""
    memory: list[dict[str, Any]] | None = None
    """A ``memory`` stage: each trial's peak against the memory budget (``peak_bytes``,
    ``budget_bytes``, ``fits``), as the guide's diagnosis has them."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], run_dir: Path, notes: list[str]) -> Stage:
        known = typed(cls, data, "diagnosis.json: stage", notes)
        stage = cls(**{"stage": 0, **known})
        stage.profile = relative(stage.profile, run_dir)
        if stage.gain is None and stage.best_samples_per_s and stage.incumbent_samples_per_s:
            stage.gain = stage.best_samples_per_s / stage.incumbent_samples_per_s
        return stage


@dataclass
class Kernel:
    name: str
    total_ms: float
    count: int
    share: float
    """Fraction of the time of all kernels (of all compute operators' self time on CPU)."""


@dataclass
class RankBuckets:
    rank: int
    step_time_ms: float
    """Median step time of the rank."""
    buckets: dict[str, float]
    """Fraction of the rank's step time per bucket (autotune.profiling.BUCKETS)."""


HOST_BOUND = 0.25
"""Launch overhead's share of a GPU step from which the report calls its speed the host's."""


@dataclass
class Profile:
    """One profiling folder: its traces and their classification (classification.summary)."""

    path: str
    """The folder, relative to the run folder."""
    trial: int | None
    traces: list[str]
    """Trace files, relative to the run folder."""
    device: str | None = None
    step_time_ms: float | None = None
    overhead: float | None = None
    """Profiler overhead: profiled over unprofiled step time, minus one."""
    dominant: str | None = None
    buckets: dict[str, float] | None = None
    ranks: list[RankBuckets] | None = None
    top_kernels: list[Kernel] | None = None
    measured_step_ms: float | None = None
    """The step at the rate its trial really ran where its loader set that rate (loader-bound): the
    profiled steps came from the workers' buffer and are shorter (None: not loader-bound)."""

    @property
    def bad_overhead(self) -> bool:
        """The profiler's overhead is outside [0, 100 %]: the profiled or the unprofiled steps were
        disturbed (a busy host, a loader catching up), and the figure is a bad measurement."""
        return self.overhead is not None and not 0.0 <= self.overhead <= 1.0

    @property
    def host_bound(self) -> float | None:
        """The GPU step's share of launch overhead where it is :data:`HOST_BOUND` or more (else
        None): the GPU waits on the host to launch its kernels, so the step's speed is the host
        CPU's (how fast it is, and how shared), not the GPU's."""
        share = (self.buckets or {}).get("launch_overhead")
        if self.device != "gpu" or share is None or share < HOST_BOUND:
            return None
        return share

    def scaled(self, rank: RankBuckets) -> tuple[float, dict[str, float]]:
        """A rank's step (ms) and bucket shares at the measured rate: the profiled split, with the time
        a loader-bound step waits beyond the profiled one added to ``data_stall``."""
        if self.measured_step_ms is None or self.measured_step_ms <= rank.step_time_ms:
            return rank.step_time_ms, rank.buckets
        extra = self.measured_step_ms - rank.step_time_ms
        ms = {b: v * rank.step_time_ms for b, v in rank.buckets.items()}
        ms["data_stall"] = ms.get("data_stall", 0.0) + extra
        return self.measured_step_ms, {b: v / self.measured_step_ms for b, v in ms.items()}

    @classmethod
    def read(cls, path: Path, run_dir: Path, notes: list[str]) -> Profile:
        prof = cls(
            path=in_run(path, run_dir),
            trial=folder.trial_of(path),
            traces=[in_run(p, run_dir) for p in folder.trace_files(path, run_dir, notes)],
        )
        summary = (
            folder.read_json(path / folder.SUMMARY, notes)
            if folder.inside(path / folder.SUMMARY, run_dir, notes)
            else None
        )
        c = (summary or {}).get("classification")
        if not isinstance(c, dict):
            return prof
        source = f"{prof.path}/{folder.SUMMARY}"
        ranks = _records(RankBuckets, c.get("ranks"), source, notes)
        kernels = _records(Kernel, c.get("top_kernels", []), source, notes)
        if ranks is None or kernels is None:
            notes.append(f"{source} has an unexpected shape; its buckets are left out")
            return prof
        prof.ranks, prof.top_kernels = ranks, kernels
        loose = {k: c.get(k) for k in ("device", "dominant", "buckets", "step_time_ms")}
        loose["overhead"] = summary.get("overhead")
        for key, value in typed(cls, loose, source, notes).items():
            setattr(prof, key, value)
        return prof


def _records(cls: type, items: Any, source: str, notes: list[str]) -> list | None:
    """Each of ``items`` as a ``cls``; None where one is not a whole record of it."""
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return None
    records = [typed(cls, item, source, notes) for item in items]
    required = {f.name for f in fields(cls)}  # Kernel and RankBuckets: every field
    if not all(set(r) == required for r in records):
        return None
    return [cls(**r) for r in records]


@dataclass
class TrialRow:
    """One trial of the study, as the table shows it."""

    number: int
    state: str
    """Optuna's state: COMPLETE, PRUNED, FAIL, RUNNING or WAITING."""
    outcome: str
    """``ok``, ``over budget``, ``pruned``, ``running``, or why it gave no measurement (``oom``, ``timeout``, ...)."""
    samples_per_s: float | None
    """Measured samples/s; for a pruned trial, its last reported value."""
    peak_memory_bytes: int | None
    mfu: float | None
    useful_mfu: float | None
    """``mfu`` counting only the FLOPs that reach the loss or a gradient."""
    params: dict[str, Any]
    stage: int | None
    group: str | None
    dominant: str | None
    """The dominant time bucket of the trial's profile, where it was profiled."""
    error: str | None
    duration_s: float | None
    log: str | None
    """The trial's log file, relative to the run folder."""
    reference: str | None = None
    """The changes to stock this trial measures for comparison (``autotune run --reference``)."""
    window_samples_per_s: float | None = None
    """Where the loader set ``samples_per_s`` (loader-bound): what the measured window ran at."""
    stock: bool = False
    best: bool = False
    pareto: bool = False
    step_time_spread: float | None = None
    """p10-p90 of the measured steps relative to their median."""
    host_busy: float | None = None
    """Share of the host's CPUs other processes used when the trial started."""
    noise: list[str] | None = None
    """Why its measurement is not taken on its word (:func:`autotune.search.noise.flags`)."""
    remeasured_samples_per_s: float | None = None
    """A second run of a noisy trial (its value is the lower of the two)."""
    noisy: bool = False
    """Noisy and not settled by a second run: never the best."""
    parity_passed: bool | None = None
    parity_pending: bool = False
    """It changes what is computed and had no parity reference yet: not taken as the best."""
    parity_undecided: str | None = None
    """Why its window was too short to judge its loss parity: not taken as the best."""
    numerics: dict[str, Any] | None = None
    """Its knobs at values that change what is computed, not only how fast (fp8 layers, low-bit
    optimizer states: the knob's ``numerics``): loss parity with stock decides whether it may lead."""
    cost: dict[str, float] | None = None
    """Where its wall time went, seconds per part (:mod:`autotune.train.window.cost`)."""

    @property
    def failed(self) -> bool:
        if self.outcome == "duplicate":  # not run: a configuration measured already
            return False
        return self.state == "FAIL" or self.outcome not in (
            "ok",
            "over budget",
            "pruned",
            "running",
            "waiting",
        )


def outcome_of(t: FrozenTrial) -> str:
    reason = reason_of(t)
    if t.state == TrialState.COMPLETE:
        if reason:
            return reason
        return "over budget" if constraint_of(t)[0] > 0 else "ok"
    if t.state == TrialState.FAIL:
        return reason or "interrupted"
    return t.state.name.lower()


def trial_row(t: FrozenTrial, run_dir: Path, *, stock: bool, best: bool, pareto: bool) -> TrialRow:
    a = t.user_attrs
    record = record_of(t)
    m = record.measurement if record is not None else None
    profile = record.profile if record is not None else None
    speed = m.samples_per_s if m is not None else None
    if speed is None and t.state == TrialState.PRUNED and t.intermediate_values:
        speed = t.intermediate_values[max(t.intermediate_values)]
    log = run_dir / "logs" / f"trial-{t.number:04d}.log"
    duration = (
        (t.datetime_complete - t.datetime_start).total_seconds()
        if t.datetime_complete and t.datetime_start
        else None
    )
    return TrialRow(
        number=t.number,
        state=t.state.name,
        outcome=outcome_of(t),
        samples_per_s=speed,
        peak_memory_bytes=m.memory.allocated_bytes if m else None,
        mfu=m.mfu if m else None,
        useful_mfu=m.useful_mfu if m else None,
        params=dict(t.params),
        stage=a.get(STAGE),
        group=a.get(GROUP),
        dominant=profile.dominant if profile else None,
        error=record.failure.error if record is not None and record.failure is not None else None,
        duration_s=duration,
        log=in_run(log, run_dir) if log.is_file() else None,
        reference=a.get(REFERENCE),
        stock=stock,
        best=best,
        pareto=pareto,
        window_samples_per_s=m.loader.window_samples_per_s if m and m.loader.bound else None,
        step_time_spread=m.step_time.spread if m else None,
        host_busy=record.host.others_busy
        if record is not None and record.host is not None
        else None,
        noise=flags(record) or None,
        remeasured_samples_per_s=_again(record),
        noisy=bool(a.get(NOISY)),
        parity_passed=parity_passed(t),
        parity_pending=parity_pending(t),
        parity_undecided=parity_undecided(t),
        numerics=changes_numerics(t.params) or None,
        cost={k: v for k, v in record.cost.parts.items() if v >= 0.05}
        if record is not None and record.cost
        else None,
    )


def _again(record) -> float | None:
    again = record.remeasure if record is not None else None
    return (
        again.measurement.samples_per_s
        if again is not None and again.measurement is not None
        else None
    )


def pareto_front(trials: list[FrozenTrial]) -> set[int]:
    """Numbers of the measured trials no other trial beats on both samples/s (up) and peak memory (down)."""
    points = [
        (t.number, m.samples_per_s, m.memory.allocated_bytes)
        for t in trials
        if measured(t) and (m := measurement_of(t)) is not None
    ]

    def dominated(s: float, m: int) -> bool:
        return any(s2 >= s and m2 <= m and (s2 > s or m2 < m) for _, s2, m2 in points)

    return {n for n, s, m in points if not dominated(s, m)}
