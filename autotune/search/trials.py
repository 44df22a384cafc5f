"""A study's trials as records: the one reader and writer of a trial's attributes.

The study stores each trial's :class:`~autotune.train.trial.record.TrialRecord` with :func:`store`
(its JSON in ``user_attrs[RECORD]``, plus the study's own attributes of it); the guide, the
report, ``autotune.search.output`` and the benchmarks read it back with :func:`record_of` and ask
:func:`feasible`, :func:`best_trial` and :func:`stock_trial` here, so that no layer parses
another's attributes.

Attributes the study sets on a trial beside the record: ``STOCK`` and ``REFERENCE`` (queued
with the trial), ``STAGE`` and ``GROUP`` (the guide's stage), ``WORKER`` (host:pid),
``QUEUED_AGAIN_FROM``, ``CONSTRAINT`` (memory: (peak - budget) / budget, feasible when <= 0),
``PROFILE_DIR`` (the profiled window's folder, relative to the run folder), ``NOISY`` (a search
trial whose measurement was flagged, :func:`autotune.search.noise.flags`, and not settled by a
second run: never the best), ``PARITY`` (its loss parity against the reference's losses,
:mod:`autotune.search.vet`, a mapping with ``passed``: a trial that fails it, or that changes what
is computed and was measured before any reference existed, ``passed`` None, is never the best),
``UNCAPPED`` (on the stock trial: the losses of stock run without the memory cap, or why it gave
none) and ``RECHECK_OF`` (a trial queued again to compare one measured before a reference existed).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.redact import environment_secrets, hide_secrets
from autotune.train.trial.record import (
    INTERRUPTED,
    Failure,
    Measurement,
    ProfileSummary,
    TrialRecord,
)

RECORD = "record"
CONSTRAINT = "constraint"
PROFILE_DIR = "profile_dir"
STOCK = "stock"
REFERENCE = "reference"
STAGE = "stage"
GROUP = "group"
WORKER = "worker"
QUEUED_AGAIN_FROM = "queued_again_from"
NOISY = "noisy"
PARITY = "parity"
UNCAPPED = "uncapped"
RECHECK_OF = "recheck_of"

BUDGET = "budget"
"""Failure reason of a trial stopped by the end of ``--time-budget`` (queued again, not a verdict on it)."""
QUEUED_AGAIN = (BUDGET, INTERRUPTED)  # INTERRUPTED: the trial's machinery lost it (record.py)
"""Reasons that say nothing of the configuration: :mod:`autotune.search.recovery` queues the trial again."""
COST = "cost"
"""Failure reason of a trial not started: its expected cost exceeded the time budget left (queued again)."""
DUPLICATE = "duplicate"
"""Failure reason of a trial the sampler drew with the parameters of one measured already (not run)."""
PREDICTED_OOM = "predicted_oom"
"""Failure reason of a trial not run: its predicted peak exceeded the memory budget
(:mod:`autotune.search.predict`); told to the sampler as out of memory."""
PREDICTED = "predicted_peak"
"""A trial's predicted peak before it ran (:meth:`autotune.search.predict.Prediction.to_dict`)."""
CONVERGED = "autotune.converged"
"""The study's user attribute: why it stopped by itself (``autotune.search.converge``), as JSON."""
ERROR_CHARS = 2000
"""A failure's message kept in the study (a refused configuration can list many choices)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Control characters other than tab and newline."""


def store(
    trial: optuna.Trial,
    record: TrialRecord,
    *,
    constraint: float | None = None,
    profile_dir: str | None = None,
    parity: dict[str, Any] | None = None,
    noisy: bool = False,
) -> None:
    """Write ``record`` into the running ``trial``; ``constraint`` also goes to the sampler."""
    for key, value in attrs_of(
        record, constraint=constraint, profile_dir=profile_dir, parity=parity, noisy=noisy
    ).items():
        trial.set_user_attr(key, value)
    if constraint is not None:
        trial.set_constraint("memory", constraint)


def _scrubbed(failure: Failure) -> Failure:
    """``failure`` with its message cut to ``ERROR_CHARS``, no secret of the environment in its
    words nor any URL's password (a workload's message may quote its token or a URL it could not
    reach), and only characters a file can hold."""
    secrets = environment_secrets()
    traceback = _readable(hide_secrets(failure.traceback, secrets)) if failure.traceback else None
    error = _readable(hide_secrets(failure.error, secrets))[:ERROR_CHARS]
    return replace(failure, error=error, traceback=traceback)


def _readable(text: str) -> str:
    """``text`` with lone surrogates (a path's bytes that did not decode: trials.csv's writer
    refuses them) and control characters (a terminal's escapes) written out as escapes."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def attrs_of(
    record: TrialRecord,
    *,
    constraint: float | None = None,
    profile_dir: str | None = None,
    parity: dict[str, Any] | None = None,
    noisy: bool = False,
) -> dict[str, Any]:
    """The user attributes :func:`store` writes for ``record`` (``optuna.trial.create_trial`` takes them too)."""
    if record.failure is not None:
        record = replace(record, failure=_scrubbed(record.failure))
    attrs: dict[str, Any] = {RECORD: record.to_json()}
    if constraint is not None:
        attrs[CONSTRAINT] = constraint
    if profile_dir is not None:
        attrs[PROFILE_DIR] = profile_dir
    if parity is not None:
        attrs[PARITY] = parity
    if noisy:
        attrs[NOISY] = True
    return attrs


def record_of(trial: FrozenTrial) -> TrialRecord | None:
    """The trial's record; None for a trial that has none (waiting, running, or lost with its worker)."""
    text = trial.user_attrs.get(RECORD)
    return _parse(text, trial.number) if isinstance(text, str) else None


@functools.lru_cache(maxsize=4096)
def _parse(text: str, number: int) -> TrialRecord:
    # every pruning decision asks for the best trial: parse each stored record once
    return TrialRecord.from_json(text, where=f"trial #{number}: user_attrs.{RECORD}")


def measurement_of(trial: FrozenTrial) -> Measurement | None:
    record = record_of(trial)
    return record.measurement if record is not None else None


def profile_of(trial: FrozenTrial) -> ProfileSummary | None:
    record = record_of(trial)
    return record.profile if record is not None else None


def reason_of(trial: FrozenTrial) -> str | None:
    """Why the trial gave no measurement (None: it did, or has not ended)."""
    record = record_of(trial)
    return record.failure.reason if record is not None and record.failure is not None else None


def constraint_of(trial: FrozenTrial) -> list[float]:
    """The trial's constraint values: feasible when every value is <= 0.

    A value that is not a number (a study edited, or written by another tool), or NaN, reads as
    infinitely over: nothing shows that the trial fit, and a traceback would cost the whole report.
    """
    value = trial.user_attrs.get(CONSTRAINT, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return [math.inf]
    return [float(value)]


def span_s(trial: FrozenTrial) -> float:
    """How long the trial ran, start to end, seconds (0 while it has no end)."""
    if trial.datetime_start is None or trial.datetime_complete is None:
        return 0.0
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def busy_s(trials: list[FrozenTrial]) -> float:
    """Seconds in which at least one trial ran: the union of the ended trials' spans, so that
    trials of parallel workers count once and the time between two runs of a study not at all. A
    trial lost with its tuner is left out: its end is when a later tuner found it, not when it stopped."""
    spans = sorted(
        (t.datetime_start, t.datetime_complete)
        for t in trials
        if t.datetime_start and t.datetime_complete and reason_of(t) != INTERRUPTED
    )
    total, covered = 0.0, None
    for start, end in spans:
        start = start if covered is None else max(start, covered)
        if end > start:
            total += (end - start).total_seconds()
            covered = end
    return total


def measured(trial: FrozenTrial) -> bool:
    """Complete with a measurement (within the memory budget or not)."""
    return trial.state == TrialState.COMPLETE and measurement_of(trial) is not None


def feasible(trial: FrozenTrial) -> bool:
    """Complete, not failed (out of memory), within the memory budget."""
    return (
        trial.state == TrialState.COMPLETE
        and reason_of(trial) is None
        and constraint_of(trial)[0] <= 0
    )


def eligible(trial: FrozenTrial) -> bool:
    """Feasible, and neither a reference, nor noisy without a second run, nor failing loss parity
    (nor judged on a window too short to tell)."""
    a = trial.user_attrs
    return (
        feasible(trial)
        and not a.get(REFERENCE)
        and not a.get(NOISY)
        and parity_passed(trial) is not False
        and not parity_pending(trial)
        and not parity_undecided(trial)
    )


def parity_passed(trial: FrozenTrial) -> bool | None:
    """Whether the trial's losses matched the reference's (None: not compared)."""
    parity = trial.user_attrs.get(PARITY)
    passed = parity.get("passed") if isinstance(parity, dict) else None
    return None if passed is None else bool(passed)


def parity_pending(trial: FrozenTrial) -> bool:
    """The trial changes what is computed and had no reference to be compared with."""
    parity = trial.user_attrs.get(PARITY)
    return (
        isinstance(parity, dict)
        and "passed" in parity
        and parity["passed"] is None
        and not parity.get("undecided")
    )


def parity_undecided(trial: FrozenTrial) -> str | None:
    """Why the trial's window was too short to judge its loss parity (None: it was not)."""
    parity = trial.user_attrs.get(PARITY)
    if isinstance(parity, dict) and parity.get("undecided"):
        return str(parity.get("note") or "too few steps to judge loss parity")
    return None


def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The trials that may be the best, fastest first."""
    return sorted(
        (t for t in study.get_trials(deepcopy=False) if eligible(t)), key=lambda t: -t.value
    )


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The fastest eligible trial of the search (chosen here, so that the random sampler obeys the
    budget too). ``--reference`` trials are measured for comparison only: they are never the
    incumbent the guide builds on, nor ``best.yaml`` (on an H200 a faster reference became the
    incumbent and every later trial inherited its whole-model compile). A trial that trains a
    different model (loss parity failed) or whose number is noise (``NOISY``) is not either."""
    ranked = ranked_trials(study)
    return ranked[0] if ranked else None


def stock_trial(study: optuna.Study) -> FrozenTrial | None:
    """The measurement of the stock configuration (not one stopped and queued again)."""
    return next(
        (
            t
            for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get(STOCK) and reason_of(t) not in QUEUED_AGAIN
        ),
        None,
    )
