"""The winner measured again: stock and the best, interleaved, in fresh processes, at the study's end.

A study's speed-up divides two numbers measured minutes apart, each from a few steps of one run;
on a shared machine either can be off by more than the speed-up (the README's CPU study reported
4.03x for a ``best.yaml`` that trains ~18 % slower than stock on a quiet machine). So at the end
of every run (after the last trial, after ``--time-budget``'s stop, after convergence) the stock
configuration and the best are run again in the order stock, best, stock, best (a runner-up
within noise of the best after each best: the faster of the two is kept), ``rounds`` rounds or up
to ``MAX_ROUNDS`` while the rounds of one configuration differ by more than ``WIDE`` (or a run's
own steps varied by ``noise.WIDE_SPREAD`` more than its configuration's do by nature; a loader-bound
run's vary with its loader's bursts, whatever the host); such a further round runs stock, the
candidate ahead so far and only a candidate whose own rounds are that wide. Where some rounds are
clean (no run's steps varied that much), only those count. The confirmed samples/s of each is the
median of its rounds, the confirmed speed-up the median over rounds of its samples/s over stock's
in the same round (which of two candidates is kept is decided over the rounds both ran); that is
the speed-up ``autotune run`` prints and writes (``best.yaml``'s ``provenance``:
``confirmation``). A candidate whose run fails is dropped; where no candidate is faster than stock
when measured again, ``best.yaml`` is the stock configuration.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.boundedread import read_text
from autotune.config.io import write_text_atomic
from autotune.errors import AutotuneError
from autotune.search.noise import WIDE_SPREAD, margin, within
from autotune.search.options import StudyOptions, run_env
from autotune.search.params import config_of
from autotune.search.trials import measurement_of, ranked_trials, record_of, span_s, stock_trial
from autotune.train.trial.launch import launch

MAX_ROUNDS = 4
WIDE = 0.1
"""Rounds of one configuration that differ by more than this share of their median call for another."""
FILE = "confirmation.json"


@dataclass
class Run:
    """One confirmation run."""

    round: int
    trial: int
    samples_per_s: float | None
    step_time_spread: float | None = None
    host_busy: float | None = None
    wall_s: float | None = None
    loader_bound: bool = False
    """Its rate was its loader's: its steps vary with the loader's bursts, not with the host's load."""
    compile_s: float | None = None
    """Compiling in this run: against the trial's own compile, what the study's compile cache saved."""
    compile_cache: dict[str, int] = field(default_factory=dict)
    """The compile caches' hit and miss counters in this run."""
    error: str | None = None


@dataclass
class Confirmation:
    """What measuring stock and the best again gave."""

    stock_trial: int
    trial: int
    """The winner: the study's best, its runner-up, or the stock trial where neither was faster."""
    samples_per_s: float | None
    """The winner's median over its rounds (None: not confirmed)."""
    stock_samples_per_s: float | None
    speedup: float | None
    """The confirmed speed-up of the winner over stock."""
    study_speedup: float | None
    """What the study's own trials said (best over stock)."""
    rounds: int
    spread: dict[str, float] = field(default_factory=dict)
    """Per trial number: (max - min) / median of its rounds' samples/s."""
    medians: dict[str, float] = field(default_factory=dict)
    """Per trial number: the median of its rounds' samples/s."""
    runs: list[Run] = field(default_factory=list)
    note: str = ""
    """What the confirmation changed or could not do, for a person."""
    measured_rounds: dict[str, int] = field(default_factory=dict)
    """Per trial number: the rounds its median and spread are taken over (the kept ones)."""

    @property
    def confirmed(self) -> bool:
        return self.speedup is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        runs = [Run(**r) for r in data.get("runs", [])]
        return cls(**{**data, "runs": runs})

    def spread_text(self, trial: int) -> str:
        """``±3 %`` (half the rounds' range over their median), or ``1 round, no spread``: one round
        has no range to show, and ``±0 %`` would claim a precision it does not have."""
        n = self.measured_rounds.get(str(trial))
        if n is None:  # a confirmation written before the count was kept
            n = sum(1 for r in self.runs if r.trial == trial and r.samples_per_s is not None)
        if (n or self.rounds) < 2:
            return "1 round, no spread"
        return f"±{50 * self.spread.get(str(trial), 0):.0f} %"

    def line(self) -> str:
        if not self.confirmed:
            return f"not confirmed: {self.note}"
        rounds = f"{self.rounds} round{'s' if self.rounds != 1 else ''}"
        text = (
            f"confirmed in {rounds}: #{self.trial} {self.samples_per_s:.2f} samples/s "
            f"({self.spread_text(self.trial)}), stock {self.stock_samples_per_s:.2f} "
            f"({self.spread_text(self.stock_trial)}): {self.speedup:.2f}x stock"
        )
        if self.study_speedup is not None:
            text += f" (the study's trials said {self.study_speedup:.2f}x)"
        return text + (f"; {self.note}" if self.note else "")


def candidates(study: optuna.Study) -> list[FrozenTrial]:
    """The best and, where it is within noise of the best, the runner-up; none where the best is the
    stock trial (nothing to confirm: ``best.yaml`` is stock)."""
    stock = stock_trial(study)
    ranked = ranked_trials(study)
    if stock is None or not ranked or ranked[0].number == stock.number:
        return []
    best = ranked[0]
    out = [best]
    for t in ranked[1:2]:
        if t.number != stock.number and within(
            float(t.value), float(best.value), margin(measurement_of(t), measurement_of(best))
        ):
            out.append(t)
    return out


CACHED_COMPILE = 0.1
"""Share of a trial's compile time a run of the same configuration still spends, its graphs in the
study's compile cache (tiny on a CPU: 245 s compiling cold, 24 s warm; BENCHMARKS.md)."""
CACHED_COMPILE_BYPASSED = 0.55
"""The same where the trial's AOTAutograd graphs bypassed the cache (``autograd_cache_bypass``:
torchao's fp8 training layers, in a region that trains): Dynamo and AOTAutograd run again, only
Inductor's and Triton's work is served (N1.7's fp8 best on one H200, when its frozen layers still
bypassed too: 211 s in its trial, ~117 s each run again; BENCHMARKS.md)."""


def run_cost_s(trial: FrozenTrial) -> float:
    """What one unprofiled run of the trial's configuration costs again: its measured cost without the
    profile and a second run, its compile served by the study's cache as far as the cache can; else
    its duration."""
    record = record_of(trial)
    if record is not None and record.cost is not None:
        parts = record.cost.parts
        cached = (
            CACHED_COMPILE_BYPASSED
            if record.cost.compile_cache.get("autograd_cache_bypass")
            else CACHED_COMPILE
        )
        again = (
            record.cost.wall_s
            - parts.get("profile", 0.0)
            - parts.get("remeasure", 0.0)
            - (1.0 - cached) * parts.get("compile", 0.0)
        )
        return max(1.0, again)
    return span_s(trial)


def again_s(trial: FrozenTrial, runs: list[Run]) -> float:
    """What the next confirmation run of the trial's configuration costs: its last one's wall time
    where it has run already, else :func:`run_cost_s`'s estimate."""
    walls = [r.wall_s for r in runs if r.trial == trial.number and r.wall_s is not None]
    return walls[-1] if walls else run_cost_s(trial)


def reserve_s(study: optuna.Study, rounds: int) -> float:
    """Time to keep for confirming the current best: ``rounds`` runs of stock and of the best; none
    where stock has no measurement (out of memory under the budget: nothing to confirm against)."""
    stock, found = stock_trial(study), candidates(study)
    if rounds <= 0 or stock is None or measurement_of(stock) is None or not found:
        return 0.0
    return rounds * (run_cost_s(stock) + run_cost_s(found[0]))


def previous(out: Path, study: optuna.Study, rounds: int) -> Confirmation | None:
    """The confirmation a former run of the study wrote, if it confirmed the same trials."""
    path = out / FILE
    if not path.exists():
        return None
    stock, found = stock_trial(study), candidates(study)
    if stock is None:
        return None
    # a file of another shape (edited, another program's) is not one this study wrote
    try:
        data = json.loads(read_text(path))
        check_confirmation(data, {stock.number, *(t.number for t in found)})
        old = Confirmation.from_dict(data)
    # TypeError: a field missing, or one this module does not write; RecursionError: nested past
    # Python's stack
    except (AutotuneError, OSError, ValueError, TypeError, RecursionError):
        return None
    same = old.stock_trial == stock.number and {str(t.number) for t in found} <= set(old.medians)
    return old if same and old.rounds >= rounds and old.confirmed else None


def _count(x: Any) -> bool:
    return type(x) is int and x >= 0


def _rate(x: Any) -> bool:
    return x is None or (type(x) in (int, float) and math.isfinite(x) and x >= 0)


def _table(value: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: (
        isinstance(x, dict) and all(isinstance(k, str) and value(v) for k, v in x.items())
    )


def _runs(x: Any) -> bool:
    return isinstance(x, list) and all(
        isinstance(r, dict)
        and _count(r.get("round"))
        and _count(r.get("trial"))
        and _rate(r.get("samples_per_s"))
        for r in x
    )


_FIELDS: dict[str, Callable[[Any], bool]] = {
    "stock_trial": _count,
    "rounds": _count,
    "samples_per_s": _rate,
    "stock_samples_per_s": _rate,
    "speedup": _rate,
    "study_speedup": _rate,
    "spread": _table(_rate),
    "medians": _table(_rate),
    "measured_rounds": _table(_count),
    "note": lambda x: isinstance(x, str),
    "runs": _runs,
}
"""What each field of a confirmation read back must be: the types this module writes (its numbers go
into best.yaml, the output and the report's page)."""


def check_confirmation(data: Any, numbers: set[int]) -> None:
    """Raise ValueError naming the first field of ``data`` (a confirmation read back from
    confirmation.json, or best.yaml's provenance) that is not of the type this module writes
    (``speedup 'fast'``), or a winner (``trial``) not among ``numbers``. Fields it lacks are left to
    the reader (an older version wrote fewer)."""
    if not isinstance(data, dict):
        raise ValueError(_shown(data))
    for key, ok in _FIELDS.items():
        if key in data and not ok(data[key]):
            raise ValueError(f"{key} {_shown(data[key])}")
    if type(data.get("trial")) is not int or data["trial"] not in numbers:
        raise ValueError(f"trial {_shown(data.get('trial'))}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}..."


def confirm(
    opts: StudyOptions,
    study: optuna.Study,
    rounds: int,
    *,
    deadline: float | None = None,
    report: Callable[[str], None] = print,
) -> Confirmation | None:
    """Measure stock and the best (and a runner-up within noise) again; None where there is nothing to
    confirm (no stock measurement, or stock is the best). ``deadline`` (``time.monotonic()``): no run
    starts that would not end before it, by the trial's own cost, and no round that could not run both
    stock and the best."""
    stock = stock_trial(study)
    found = candidates(study)
    if stock is None or measurement_of(stock) is None or not found:
        return None
    study_speedup = float(found[0].value) / float(stock.value) if stock.value else None
    kept = previous(opts.out, study, rounds)
    if kept is not None:
        report(f"confirmation of #{kept.trial} against stock kept from the last run of the study")
        return kept
    order = [stock, *found]
    runs: list[Run] = []
    note = ""
    for r in range(1, MAX_ROUNDS + 1):
        need = sum(
            again_s(t, runs) for t in order[:2]
        )  # a round without the best's run says nothing
        if deadline is not None and deadline - time.monotonic() < need:
            note = (
                f"the time budget ended before the confirmation did (a round of stock and #{order[1].number} takes "
                f"~{need:.0f} s, {max(0.0, deadline - time.monotonic()):.0f} s were left)"
            )
            break
        for t in order:
            if deadline is not None and deadline - time.monotonic() < again_s(t, runs):
                note = "the time budget ended before the confirmation did"
                break
            runs.append(_run(opts, t, r, deadline))
            report(_progress(runs[-1], t is stock))
        else:
            order = [t for t in order if t is stock or not _failed(runs, t.number)]
            if _failed(runs, stock.number) or r >= rounds and not _wide(runs, order):
                break
            if r >= rounds:
                order = still_open(runs, order)
            continue
        break
    return _summary(stock, found, runs, study_speedup, note)


def _run(opts: StudyOptions, trial: FrozenTrial, round_: int, deadline: float | None) -> Run:
    log = opts.out / "logs" / f"confirm-{round_}-trial-{trial.number:04d}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    timeout = (
        opts.timeout_per_trial
        if deadline is None
        else max(1.0, min(opts.timeout_per_trial, deadline - time.monotonic()))
    )
    record = launch(
        config_of(opts, trial),
        steps=opts.steps,
        warmup=opts.warmup,
        nproc=opts.nproc,
        timeout=timeout,
        log_path=log,
        extra_env=run_env(opts),
    )
    m = record.measurement
    return Run(
        round=round_,
        trial=trial.number,
        samples_per_s=m.samples_per_s if m else None,
        step_time_spread=m.step_time.spread if m else None,
        host_busy=record.host.others_busy if record.host else None,
        loader_bound=bool(m and m.loader.bound),
        wall_s=record.cost.wall_s if record.cost else None,
        compile_s=record.cost.parts.get("compile", 0.0) if record.cost else None,
        compile_cache=dict(record.cost.compile_cache) if record.cost else {},
        error=f"{record.failure.reason}: {record.failure.error}" if record.failure else None,
    )


def _progress(run: Run, stock: bool) -> str:
    what = (
        f"{run.samples_per_s:.2f} samples/s"
        if run.samples_per_s is not None
        else f"failed ({run.error})"
    )
    return f"confirming, round {run.round}: {'stock' if stock else 'trial'} #{run.trial} {what}"


def still_open(runs: list[Run], order: list[FrozenTrial]) -> list[FrozenTrial]:
    """Who runs in a round beyond the asked ones: stock, the candidate ahead so far (its ratio to
    stock is the figure being settled) and any other whose own rounds differ by more than ``WIDE``.
    A steady runner-up measured again says nothing new, and a run of a compiled configuration costs
    minutes where a loader-bound stock costs seconds."""
    stock, found = order[0], order[1:]
    if len(found) < 2:
        return order
    leader = _leader(runs, stock.number, found)
    return [
        stock,
        *(t for t in found if t is leader or _range(_rates(runs, t.number)) > WIDE),
    ]


def _leader(runs: list[Run], stock: int, found: list[FrozenTrial]) -> FrozenTrial:
    """The candidate with the highest ratio to stock over the rounds every one of them ran (a
    candidate left out of later rounds is not compared on rounds it did not run)."""
    both = set.intersection(*({r.round for r in runs if r.trial == t.number} for t in found))
    return max(
        found,
        key=lambda t: _ratio(runs, t.number, stock, both) or _ratio(runs, t.number, stock) or 0.0,
    )


def _rates(runs: list[Run], number: int) -> list[float]:
    return [r.samples_per_s for r in runs if r.trial == number and r.samples_per_s is not None]


def _failed(runs: list[Run], number: int) -> bool:
    return any(r.trial == number and r.samples_per_s is None for r in runs)


def _range(rates: list[float]) -> float:
    return (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0


def natural_spread(trials: list[FrozenTrial], runs: list[Run]) -> dict[int, float]:
    """Per trial number: the narrowest step-time spread its configuration showed (its trial, a re-measure,
    its confirmation runs): a spread wider than this by ``WIDE_SPREAD`` is the host's doing."""
    out: dict[int, float] = {}
    for t in trials:
        record = record_of(t)
        seen = [
            r.step_time_spread
            for r in runs
            if r.trial == t.number and r.step_time_spread is not None
        ]
        for m in (
            (record.measurement, record.remeasure.measurement if record.remeasure else None)
            if record
            else ()
        ):
            if m is not None:
                seen.append(m.step_time.spread)
        if seen:
            out[t.number] = min(seen)
    return out


def _disturbed(run: Run, natural: dict[int, float]) -> bool:
    """The run's steps varied more than the host alone explains: not a loader-bound run (a stock that
    waits on 2 workers varied 77 %, 111 %, 283 %, 237 % and 123 % in five runs on an idle H200 host,
    at 39-45 samples/s), and wider than its configuration's narrowest by ``WIDE_SPREAD``."""
    return (
        not run.loader_bound
        and (run.step_time_spread or 0.0) > natural.get(run.trial, 0.0) + WIDE_SPREAD
    )


def _wide(runs: list[Run], order: list[FrozenTrial]) -> bool:
    """The rounds of a configuration differ by more than ``WIDE``, or the last round's run of one had
    steps that varied more widely than its configuration does by nature (a single round has no range
    of its own to judge by)."""
    numbers = {t.number for t in order}
    natural = natural_spread(order, runs)
    last = max((r.round for r in runs), default=0)
    steps_wide = any(
        r.round == last and r.trial in numbers and _disturbed(r, natural) for r in runs
    )
    return steps_wide or any(_range(_rates(runs, t.number)) > WIDE for t in order)


def clean_rounds(runs: list[Run], natural: dict[int, float] | None = None) -> set[int]:
    """Rounds whose every run measured steps that varied by at most ``noise.WIDE_SPREAD`` more than its
    configuration does by nature (``natural``, :func:`natural_spread`): on a host
    whose load swings between runs, a round with a disturbed run says more of the load than of the
    configurations (on the shared CPU machine stock ran at 2.2, 0.43, 0.97 and 17.5 samples/s in four
    rounds, the rounds' steps varying by 37 %, 50 %, 4 % and 3 %)."""
    natural = natural or {}
    out = set()
    for number in {r.round for r in runs}:
        mine = [r for r in runs if r.round == number and r.samples_per_s is not None]
        if mine and not any(_disturbed(r, natural) for r in mine):
            out.add(number)
    return out


def _ratio(runs: list[Run], trial: int, stock: int, rounds: set[int] | None = None) -> float | None:
    """The median over rounds (``rounds`` only, where given) of the trial's samples/s over stock's in
    the same round."""
    rate = {(r.round, r.trial): r.samples_per_s for r in runs if r.samples_per_s is not None}
    seen = {r.round for r in runs}
    ratios = [
        rate[(n, trial)] / rate[(n, stock)]
        for n in (seen if rounds is None else seen & rounds)
        if (n, trial) in rate and (n, stock) in rate and rate[(n, stock)] > 0
    ]
    return statistics.median(ratios) if ratios else None


def _summary(
    stock: FrozenTrial,
    found: list[FrozenTrial],
    runs: list[Run],
    study_speedup: float | None,
    note: str,
) -> Confirmation:
    all_runs, clean = runs, clean_rounds(runs, natural_spread([stock, *found], runs))
    if clean and len(clean) < len({r.round for r in runs}):
        kept = ", ".join(map(str, sorted(clean)))
        note = "; ".join(
            filter(
                None,
                [
                    note,
                    f"round(s) {kept} kept: the others had a run whose steps varied by "
                    f"over {100 * WIDE_SPREAD:.0f} % more than its configuration's do",
                ],
            )
        )
        runs = [r for r in runs if r.round in clean or r.samples_per_s is None]
    rounds = max((r.round for r in runs if r.samples_per_s is not None), default=0)
    medians = {
        str(n): statistics.median(rs)
        for n in {stock.number, *(t.number for t in found)}
        if (rs := _rates(runs, n)) and not _failed(runs, n)
    }
    spread = {str(n): _range(_rates(runs, n)) for n in map(int, medians)}
    counted = {str(n): len(_rates(runs, n)) for n in map(int, medians)}
    base = Confirmation(
        stock.number,
        found[0].number,
        None,
        None,
        None,
        study_speedup,
        rounds,
        spread,
        medians,
        all_runs,
        note,
        counted,
    )
    stock_rate = medians.get(str(stock.number))
    if stock_rate is None:
        base.note = note or "the stock configuration failed when run again"
        return base
    ran = [t for t in found if _rates(runs, t.number) or _failed(runs, t.number)]
    if not ran:  # the time budget ended first
        base.note = note or "no candidate was run again"
        return base
    alive = [t for t in ran if str(t.number) in medians]
    if not alive:
        base.note = "every candidate failed when run again: best.yaml is the stock configuration"
        base.trial, base.samples_per_s, base.stock_samples_per_s, base.speedup = (
            stock.number,
            stock_rate,
            stock_rate,
            1.0,
        )
        return base
    # interleaved rounds: each configuration against the stock run beside it, the median of those ratios
    ratios = {
        t.number: _ratio(runs, t.number, stock.number) or medians[str(t.number)] / stock_rate
        for t in alive
    }
    winner = _leader(runs, stock.number, alive) if len(alive) > 1 else alive[0]
    rate = medians[str(winner.number)]
    base.stock_samples_per_s = stock_rate
    if ratios[winner.number] <= 1.0:
        base.trial, base.samples_per_s, base.speedup = stock.number, stock_rate, 1.0
        base.note = "; ".join(
            filter(
                None,
                [
                    base.note,
                    f"measured again, #{winner.number} ran at {rate:.2f} samples/s against "
                    f"stock's {stock_rate:.2f}: no configuration beat stock, best.yaml is the "
                    "stock configuration",
                ],
            )
        )
        return base
    base.trial, base.samples_per_s, base.speedup = winner.number, rate, ratios[winner.number]
    if winner.number != found[0].number:
        base.note = "; ".join(
            filter(
                None,
                [
                    base.note,
                    f"the runner-up #{winner.number} was faster than the study's best "
                    f"#{found[0].number} when measured again",
                ],
            )
        )
    return base


def write_confirmation(out: Path, confirmation: Confirmation) -> Path:
    path = out / FILE
    write_text_atomic(path, json.dumps(confirmation.to_dict(), indent=1))
    return path
