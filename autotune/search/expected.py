"""What a trial is expected to cost before it starts, from the costs its study recorded.

Under ``--time-budget`` a trial that cannot finish in the time left is not started: it would be
stopped at the budget's end having measured nothing (on one H200 a whole-model ``max-autotune``
compile alone takes minutes). Its expected wall time is the study's typical run without
compiling (the median of ``cost.wall_s`` less ``compile`` and ``capture``, :mod:`autotune.train.window.cost`)
plus the compile and capture time of its compile settings:

* as measured: the most any trial with the same compile and graph settings spent on them (a trial
  the budget stopped counts with what it had spent: at least that much);
* not measured yet: the most any compiling trial spent, scaled by :data:`MODE_FACTOR` from that
  trial's mode to this one's;
* nothing compiled yet: no estimate of the compile (the typical run alone).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import optuna

from autotune.config import TrainConfig
from autotune.train.trial.record import Cost

MODE_FACTOR = {
    "default": 1.0,
    "reduce-overhead": 1.0,
    "max-autotune": 3.0,
    "max-autotune-no-cudagraphs": 3.0,
}
"""Compile time relative to ``default``, assumed until a trial of the mode is measured: Inductor's
max-autotune benchmarks several kernel configurations for each matmul and fused kernel."""
NOT_RUN = ("config", "duplicate", "cost", "predicted_oom")
"""Failure reasons of trials that did not run: their costs say nothing of a run."""


@dataclass(frozen=True)
class Expected:
    """A trial's expected wall time and what it is based on (for the line that skips it)."""

    seconds: float
    basis: str


def compile_key(cfg: TrainConfig) -> tuple:
    """The settings a trial's compile and capture time depend on."""
    c, g = cfg.compile, cfg.graphs
    return (tuple(c.regions), c.mode, c.fullgraph, c.dynamic, g.mode, tuple(g.regions))


def _fixed_s(cost: Cost) -> float:
    return cost.parts.get("compile", 0.0) + cost.parts.get("capture", 0.0)


def expected_cost(
    cfg: TrainConfig,
    spent: list[tuple[int, TrainConfig, Cost]],
    stopped: frozenset[int] = frozenset(),
) -> Expected | None:
    """``cfg``'s expected wall time from ``spent`` (trial number, configuration, cost of each trial
    that ran); ``stopped``: the numbers of those stopped before their end (the budget, a signal),
    whose compile time counts but whose run does not. None when no trial has a cost yet."""
    if not spent:
        return None
    whole = [max(0.0, c.wall_s - _fixed_s(c)) for n, _, c in spent if n not in stopped]
    rest = statistics.median(whole) if whole else 0.0
    key = compile_key(cfg)
    same = [(n, _fixed_s(c)) for n, k, c in spent if compile_key(k) == key]
    if same:
        n, fixed = max(same, key=lambda x: x[1])
        basis = f"{rest:.0f} s a run + {fixed:.0f} s compiling as trial #{n}" if fixed else ""
        return Expected(rest + fixed, basis or f"{rest:.0f} s a run, as trial #{n}")
    if not (cfg.compile.enabled or cfg.graphs.enabled):
        return Expected(rest, f"{rest:.0f} s a run")
    compiled = [(n, k, _fixed_s(c)) for n, k, c in spent if _fixed_s(c) > 0]
    if not compiled:
        return Expected(rest, f"{rest:.0f} s a run (no compile measured yet)")
    n, k, fixed = max(compiled, key=lambda x: x[2])
    scale = MODE_FACTOR.get(cfg.compile.mode, 1.0) / MODE_FACTOR.get(k.compile.mode, 1.0)
    return Expected(
        rest + fixed * scale,
        f"{rest:.0f} s a run + ~{fixed * scale:.0f} s compiling ({cfg.compile.mode}: "
        f"{scale:g}x trial #{n}'s {fixed:.0f} s in {k.compile.mode})",
    )


def expected_of(cfg: TrainConfig, study: optuna.Study, config_of) -> Expected | None:
    """:func:`expected_cost` of ``cfg`` from the study's finished trials that ran (each one's
    configuration is ``config_of(trial)``)."""
    from autotune.search.trials import QUEUED_AGAIN, reason_of, record_of

    spent, stopped = [], set()
    for t in study.get_trials(deepcopy=False):
        record = record_of(t) if t.state.is_finished() else None
        if record is None or record.cost is None or reason_of(t) in NOT_RUN:
            continue
        spent.append((t.number, config_of(t), record.cost))
        if reason_of(t) in QUEUED_AGAIN:
            stopped.add(t.number)
    return expected_cost(cfg, spent, frozenset(stopped))


def too_costly(expected: Expected | None, left_s: float) -> str | None:
    """Why a trial expected to take ``expected`` is not started (None: it fits in ``left_s``)."""
    if expected is None or expected.seconds <= left_s:
        return None
    return (
        f"not started: expected ~{expected.seconds:.0f} s ({expected.basis}), "
        f"{left_s:.0f} s left of the time budget; queued for the next run"
    )
