"""Profile guidance: the incumbent's dominant time bucket decides which knob group is searched next.

Every measured trial is profiled for a few steps after its measured window (``launch(...,
profile_after=...)``), so the incumbent's buckets are always known. The search runs in stages:

1. the stock configuration (trial 0) is measured and profiled;
2. remedies first: every knob group (:data:`~autotune.search.bottleneck.BUCKET_GROUPS`) of every
   bucket of the incumbent's profile worth acting on (at least ``MIN_SHARE`` of the step) whose
   ``remedy`` values the incumbent lacks gets them all at once in one trial (a ``remedies`` stage,
   once a study: on one H200 the best configuration is stock with every remedy, reached one remedy
   a trial only after five trials and five minutes); where that does not pay, each group, largest
   bucket first (``data_stall`` first where the incumbent's loader set its measured rate:
   :func:`~autotune.search.bottleneck.ranked_buckets`), gets one trial with its knobs at those
   values and every other knob at the incumbent's (a ``remedy`` stage; the incumbent moves on as
   soon as one pays); then a ``search`` stage takes the largest bucket whose group was not
   searched from this incumbent (:func:`~autotune.search.next_stage.blocked`) and runs up to
   ``stage_trials`` trials in which only that group's knobs vary, the others fixed at the
   incumbent's values with Optuna's ``PartialFixedSampler`` (the sampler still chooses the group's
   knobs from all it has learnt). A search tries only values that can win
   (:mod:`autotune.search.directions`: lower precisions, region by region; fewer checkpointed
   regions; the remedies the incumbent holds kept) and ends at its first trial that gains nothing
   beyond noise (:mod:`autotune.search.noise`) or when every such combination is measured
   (:mod:`autotune.search.candidates`);
3. the stage ends; its gain is best-in-stage over the incumbent it started from; the new
   incumbent's profile picks the next stage;
4. with no bucket left to act on, the search goes on over all knobs (a ``free`` stage), until a
   trial beats its incumbent beyond noise (then the stages begin again from the new incumbent)
   or the study has converged (:mod:`autotune.search.converge`).

Where the stock trial does not fit the memory budget (out of memory, or a peak over it) no trial
is an incumbent, and memory is the bottleneck: a ``memory`` stage runs stock with the memory knobs
lowered step by step, cheapest first (:mod:`autotune.search.fit`), each trial's peak against the
budget kept in the stage, until one fits and may lead; the stages above go on from it. A rung that
changes what is computed and fits before any loss-parity reference exists cannot lead
(:mod:`autotune.search.vet`): the ladder then goes on over its exact rungs only.

The stages are the chain "bottleneck -> knob group -> measured gain" of the report. They live in
the study's user attributes (``STUDY_ATTR``), so a resumed or shared study continues them, and in
``diagnosis.json`` of the run folder.
"""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import TrainConfig
from autotune.search import fit
from autotune.search.candidates import fitted_by_ladder, fixed_params, local, stock_beside, untried
from autotune.search.knobs import SearchSpace
from autotune.search.next_stage import new_stage
from autotune.search.stage import FREE, STUDY_ATTR, Stage, over, stages_of, update_best
from autotune.search.trials import parity_pending, stock_trial
from autotune.search.vet import changes_numerics


class Guide:
    """Chooses the fixed parameters of the next trial; keeps the stages."""

    def __init__(
        self,
        space: SearchSpace,
        stage_trials: int,
        enabled: bool = True,
        together: bool = True,
        stock: TrainConfig | None = None,
        memory_budget: int | None = None,
    ) -> None:
        self.space = space
        self.memory_budget = memory_budget
        self.stock = stock
        """The stock configuration: a knob that comes to exist beside a remedy (``compile.mode`` beside a
        compiled region) takes its stock value in a remedy trial, not the sampler's draw."""
        self.stage_trials = max(1, stage_trials)
        self.enabled = enabled
        self.together = together
        """Try every pending remedy at once first (a ``remedies`` stage) before one group a trial."""
        self.stages: list[Stage] = []

    # ------------------------------------------------------------------ state in the study

    def load(self, study: optuna.Study) -> None:
        self.stages = stages_of(study)
        for stage in self.stages:  # studies of before the stage kinds
            if stage.groups == [FREE]:
                stage.kind = "free"

    def save(self, study: optuna.Study) -> None:
        study.set_user_attr(STUDY_ATTR, json.dumps([s.to_dict() for s in self.stages]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "stage_trials": self.stage_trials,
            "stages": [s.to_dict() for s in self.stages],
        }

    # ------------------------------------------------------------------ decisions

    def next_trial(
        self, study: optuna.Study, incumbent: FrozenTrial | None
    ) -> tuple[dict[str, Any] | None, Stage | None]:
        """Fixed Optuna parameters for the next trial (None: sample everything) and its stage.

        Starts a new stage when the current one has had its trials. Without an incumbent (no
        feasible trial yet, e.g. the stock trial itself) nothing is guided.
        """
        if not self.enabled:
            return None, None
        if incumbent is None:
            return self._memory_trial(study)
        fitted = fitted_by_ladder(self.space, self.stock, self.stages, incumbent)
        stage = self.stages[-1] if self.stages else None
        left = (
            untried(self.space, study, stage, incumbent, self.stock) if stage is not None else None
        )
        if stage is None or over(study, stage, incumbent, left, self._length(stage)):
            self._close(study)
            stage = new_stage(
                self.space, self.stages, study, incumbent, together=self.together, fitted=fitted
            )
            self.stages.append(stage)
            self.save(study)
            left = untried(self.space, study, stage, incumbent, self.stock)
        if stage.kind == "free":
            return None, stage
        fixed = fixed_params(self.space, self.stock, stage, incumbent, fitted)
        if left and (len(left) <= self._length(stage) - len(stage.trials) or local(stage)):
            # the stage can measure every combination left: do so, rather than let the sampler draw one twice;
            # a larger group is left to the sampler, which learns from what it has measured. A local
            # group's moves (one region's precision lowered) are taken in the space's order however
            # many: the sampler would draw from every choice, raised precisions and several at once
            fixed.update(left[0])
            if local(stage):  # one move a trial: a knob the move brings into existence at stock's
                fixed.update(stock_beside(self.space, self.stock, fixed))
        return fixed, stage

    def _memory_trial(self, study: optuna.Study) -> tuple[dict[str, Any] | None, Stage | None]:
        """Where stock ran out of memory and nothing fits yet: the next rung of the memory ladder
        (:mod:`autotune.search.fit`) in a ``memory`` stage; nothing guided otherwise."""
        stock = stock_trial(study)
        if stock is None or self.stock is None or not fit.out_of_memory(stock):
            return None, None
        stage = self.stages[-1] if self.stages and self.stages[-1].kind == "memory" else None
        if stage is None:
            if any(s.kind == "memory" for s in self.stages):
                return None, None  # the ladder was climbed and nothing fitted: the sampler goes on
            stage = Stage(
                stage=len(self.stages) + 1,
                bottleneck="memory",
                share=None,
                groups=["memory"],
                knobs=[k.key for k in self.space.knobs if k.group == "memory"],
                incumbent=stock.number,
                incumbent_samples_per_s=0.0,
                profile=None,
                buckets=None,
                dominant=None,
                kind="memory",
                memory=[fit.peak_line(stock, self.memory_budget)],
            )
            self.stages.append(stage)
            self.save(study)
        trials = study.get_trials(deepcopy=False)
        tried = [t.params for t in trials if t.state != TrialState.WAITING]
        # a rung that changes what is computed fitted, with no reference to check it against: the
        # exact rungs left give one (autotune.search.vet); the others would wait for it too
        exact_only = any(parity_pending(t) for t in trials)
        for rung in fit.ladder(self.space, stock.params, self.stock.batch_size):
            # a knob the rung brings into existence (checkpointing.every beside checkpointed regions)
            # takes stock's value: left to the sampler, each draw is a new configuration and the
            # rung is never found among the trials
            rung = {**rung, **stock_beside(self.space, self.stock, rung)}
            if not any(_holds(t, rung) for t in tried) and not (
                exact_only and changes_numerics(rung)
            ):
                return rung, stage
        return None, None

    def _length(self, stage: Stage) -> int:
        return 1 if stage.kind in ("remedy", "remedies") else self.stage_trials

    def record(self, study: optuna.Study, stage: Stage | None, trial: FrozenTrial) -> None:
        """Add a finished trial to its stage and update the stage's best and gain."""
        if stage is None:
            return
        stage.trials.append(trial.number)
        if stage.kind == "memory":
            stage.memory.append(fit.peak_line(trial, self.memory_budget))
        update_best(study, stage)
        self.save(study)

    def _close(self, study: optuna.Study) -> None:
        if self.stages:
            update_best(study, self.stages[-1])


def _holds(params: dict[str, Any], rung: dict[str, Any]) -> bool:
    """A trial ran the rung: it has the rung's value of every knob the rung sets."""
    return all(params.get(k) == v for k, v in rung.items())
