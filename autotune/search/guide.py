"""Profile guidance: the incumbent's dominant time bucket decides which knob group is searched next.

Every measured trial is profiled for a few steps after its measured window (``launch(...,
profile_after=...)``), so the incumbent's buckets are always known. The search runs in stages:

1. the stock configuration (trial 0) is measured and profiled;
2. remedies first: every knob group (``BUCKET_GROUPS``) of every bucket of the incumbent's
   profile worth acting on (at least ``MIN_SHARE`` of the step) whose ``remedy`` values the
   incumbent lacks gets them all at once in one trial (a ``remedies`` stage, once a study: on one
   H200 the best configuration is stock with every remedy, reached one remedy a trial only after
   five trials and five minutes); where that does not pay, each group, largest bucket first
   (``data_stall`` first where the incumbent's loader set its measured rate:
   :func:`ranked_buckets`), gets one trial with its knobs at those values and every other knob at
   the incumbent's (a ``remedy`` stage; the incumbent moves on as soon as one pays);
   then a ``search`` stage takes the largest bucket whose group was not searched from this
   incumbent (``Guide._blocked``) and runs up to ``stage_trials`` trials in which only that
   group's knobs vary, the others fixed at the incumbent's values with Optuna's
   ``PartialFixedSampler`` (the sampler still chooses the group's knobs from all it has learnt).
   A search tries only values that can win (:mod:`autotune.search.directions`: lower precisions,
   region by region; fewer checkpointed regions; the remedies the incumbent holds kept) and ends
   at its first trial that gains nothing beyond noise (:mod:`autotune.search.noise`) or when every
   such combination is measured;
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
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import TrainConfig
from autotune.search import fit
from autotune.search.directions import LOCAL, search_choices
from autotune.search.noise import beats, margin
from autotune.search.space import Knob, SearchSpace, get_value
from autotune.search.trials import (
    PROFILE_DIR,
    eligible,
    measurement_of,
    parity_pending,
    profile_of,
    stock_trial,
)
from autotune.search.vet import changes_numerics

BUCKET_GROUPS: dict[str, tuple[str, ...]] = {
    "data_stall": ("data",),
    "launch_overhead": ("graphs", "optimizer", "compile"),
    # CUDA_DEVICE_MAX_CONNECTIONS (kernels) decides how many streams run beside the all-reduce
    "comm_wait": ("ddp", "kernels"),
    # a fused optimizer moves the optimizer state once instead of once per multi-tensor chunk. Compile
    # is searched after precision: tried before it, on the CPU benchmark its stage (checkpointing
    # there) cost 2 trials to 90 % of the best; on a GPU its remedy (the whole model: 87 ms a step
    # inside a whole-step graph on an H200, 110 ms without) is tried among the remedies anyway
    # model: the same loss computed with less work (dead outputs skipped, the projectors' weights read in
    # place); exact, so tried before the groups that trade precision or compile time for speed
    # kernels (the attention backend) after compile; memory last: checkpointing trades compute
    # for memory, which pays only where memory binds
    "compute_serial": ("model", "optimizer", "precision", "compile", "kernels", "memory"),
    # the host blocked in a synchronising call (.item(), .cpu(), a pageable copy): its remedy is to
    # remove the sync from the training code, which no knob does; graphs cannot capture a sync at all
    "sync_wait": (),
    "other": (),
}
"""Knob groups that address each bucket, in the order they are tried."""

MIN_SHARE = 0.05
"""A bucket below this share of the step is not worth a stage."""

MAX_ENUMERATED = 32
"""A search stage enumerates a discrete group of at most this many combinations."""

STAGE_PATIENCE = 1
"""A search stage ends after this many trials in a row that gained nothing beyond noise over its incumbent."""

STUDY_ATTR = "autotune.diagnosis"
FREE = "all"


@dataclass
class Stage:
    """One stage of the search: what the profile said, what was tried, what it gained."""

    stage: int
    bottleneck: str | None
    share: float | None
    groups: list[str]
    knobs: list[str]
    incumbent: int
    incumbent_samples_per_s: float
    profile: str | None
    buckets: dict[str, float] | None
    dominant: str | None
    kind: str = "search"
    """``remedies``: one trial, the remedy values of every group in ``groups`` at once; ``remedy``: one
    trial, the group's remedy values; ``search``: the group's knobs varied; ``free``: the sampler over
    every knob; ``memory``: stock did not fit the memory budget, one trial per rung of
    :func:`autotune.search.fit.ladder` until one fits."""
    memory: list[dict[str, Any]] = field(default_factory=list)
    """A ``memory`` stage: each trial's peak against the memory budget (``peak_bytes``,
    ``budget_bytes``, ``fits``), the stock trial's first."""
    loader_bound: bool = False
    """The incumbent's measured rate was its loader's, below its steps' rate: ``share`` is then at least
    the part of its step spent waiting on the loader (see :func:`ranked_buckets`)."""
    trials: list[int] = field(default_factory=list)
    best_trial: int | None = None
    best_samples_per_s: float | None = None
    gain: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def buckets_of(trial: FrozenTrial) -> dict[str, float] | None:
    """The time buckets of the trial's profiled window (None: it was not profiled)."""
    profile = profile_of(trial)
    return profile.buckets if profile is not None else None


def loader_stall(trial: FrozenTrial) -> float:
    """The part of a loader-bound trial's step spent waiting on its loader: 1 - measured rate / its
    steps' rate (0 when the loader kept up).

    The profiled steps come after the measured window, when the loader has often filled its
    prefetch queue again: on an H200 a medium-preset trial whose loader held it to 264 samples/s
    against 657 for its steps (a 60 % stall) showed a data bucket of 3 %.
    """
    measured = measurement_of(trial)
    if (
        measured is None
        or not measured.loader.bound
        or not measured.loader.window_samples_per_s
        or trial.value is None
    ):
        return 0.0
    return max(0.0, 1.0 - float(trial.value) / measured.loader.window_samples_per_s)


def ranked_buckets(trial: FrozenTrial) -> list[tuple[str, float]]:
    """The trial's buckets worth acting on (at least ``MIN_SHARE``), largest first.

    A loader-bound trial ranks ``data_stall`` first whatever its profile says: its measured rate is
    its loader's, so no other knob can raise it (on two H200s the four remedies tried before the
    loader's ran at 85-98 samples/s against stock's 105 and were pruned). Its share is then the larger of the profile's and
    :func:`loader_stall`.
    """
    buckets = dict(buckets_of(trial) or {})
    stall = loader_stall(trial)
    if stall >= MIN_SHARE:
        buckets["data_stall"] = max(stall, buckets.get("data_stall", 0.0))
    ranked = sorted(((b, v) for b, v in buckets.items() if v >= MIN_SHARE), key=lambda kv: -kv[1])
    if stall >= MIN_SHARE:
        ranked.sort(key=lambda kv: kv[0] != "data_stall")  # stable: the others keep their order
    return ranked


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
        raw = study.user_attrs.get(STUDY_ATTR)
        self.stages = [Stage(**s) for s in json.loads(raw)] if raw else []
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
        stage = self.stages[-1] if self.stages else None
        untried = self._untried(study, stage, incumbent) if stage is not None else None
        if stage is None or self._over(study, stage, incumbent, untried):
            stage = self._new_stage(study, incumbent)
            self.stages.append(stage)
            self.save(study)
            untried = self._untried(study, stage, incumbent)
        if stage.kind == "free":
            return None, stage
        fixed: dict[str, Any] = {}
        params = incumbent.params
        one_trial = stage.kind in ("remedy", "remedies")
        remedies = (
            {k.key for k in self._remedies_of(stage.groups, incumbent)} if one_trial else set()
        )
        values = self._values(incumbent)
        for knob in self.space.knobs:
            if knob.key in remedies:
                fixed[knob.key] = knob.encode(knob.remedy)
            elif (knob.group not in stage.groups or one_trial) and knob.key in params:
                fixed[knob.key] = params[knob.key]
            elif knob.key in params and len(search_choices(knob, values[knob.key]) or (0, 1)) == 1:
                fixed[knob.key] = params[
                    knob.key
                ]  # a search keeps what it may not change (a held remedy)
        if one_trial:
            fixed.update(self._stock_beside(fixed))
        if untried and len(untried) <= self._length(stage) - len(stage.trials):
            # the stage can measure every combination left: do so, rather than let the sampler draw one twice;
            # a larger group is left to the sampler, which learns from what it has measured
            fixed.update(untried[0])
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
            if rung not in tried and not (exact_only and changes_numerics(rung)):
                return rung, stage
        return None, None

    def _stock_beside(self, fixed: dict[str, Any]) -> dict[str, Any]:
        """Stock's values of the knobs that ``fixed`` brings into existence and does not set: a remedy trial
        changes its remedies alone (a sampled ``compile.mode: max-autotune`` beside the whole model compiled
        once spent 427 s of a 10-minute study benchmarking GEMMs)."""
        if self.stock is None:
            return {}
        values = {k.key: k.decode(fixed[k.key]) for k in self.space.knobs if k.key in fixed}
        out = {}
        for knob in self.space.knobs:
            if knob.key in fixed or not knob.active(values):
                continue
            value = get_value(self.stock, knob.key)
            if knob.contains(value):
                values[knob.key] = value
                out[knob.key] = knob.encode(value)
        return out

    def _over(
        self, study: optuna.Study, stage: Stage, incumbent: FrozenTrial, untried: list | None
    ) -> bool:
        """Whether ``stage`` has had its trials: its length, every candidate measured, its patience spent
        (a search), or, for the free stage, a trial that beat its incumbent beyond noise."""
        if stage.kind == "memory":  # a trial fits: the usual stages go on from it
            return True
        if stage.kind == "free":
            if incumbent.number == stage.incumbent or stage.incumbent >= len(study.trials):
                return False
            old = study.trials[stage.incumbent]
            return beats(
                float(incumbent.value),
                float(old.value or 0.0),
                margin(measurement_of(incumbent), measurement_of(old)),
            )
        if len(stage.trials) >= self._length(stage) or untried == []:
            return True
        return stage.kind == "search" and self._misses(study, stage) >= STAGE_PATIENCE

    @staticmethod
    def _misses(study: optuna.Study, stage: Stage) -> int:
        """Trials at the end of the stage that gained nothing beyond noise over its incumbent."""
        if stage.incumbent >= len(study.trials):
            return 0
        base = study.trials[stage.incumbent]
        misses = 0
        for number in reversed(stage.trials):
            t = study.trials[number] if number < len(study.trials) else None
            gained = (
                t is not None
                and eligible(t)
                and beats(
                    float(t.value),
                    stage.incumbent_samples_per_s,
                    margin(measurement_of(t), measurement_of(base)),
                )
            )
            if gained:
                break
            misses += 1
        return misses

    def _untried(
        self, study: optuna.Study, stage: Stage, incumbent: FrozenTrial
    ) -> list[dict[str, Any]] | None:
        """The combinations of a search stage's knobs not yet measured with every other knob at the
        incumbent's values, in the space's order; None where the group is not small and discrete
        (an int or float knob, or more than ``MAX_ENUMERATED`` combinations): the sampler decides.
        Combinations that change fewer of the incumbent's values come first.

        On an H200 a search of the optimizer group (one knob, three values) from an incumbent that
        already had the fused optimizer spent its three trials on fused, loop and fused again.
        """
        if stage.kind != "search":
            return None
        mine = [k for k in self.space.knobs if k.group in stage.groups]
        held = [
            k for k in self.space.knobs if k.group not in stage.groups and k.key in incumbent.params
        ]
        others = {k.key: incumbent.params[k.key] for k in held}
        values = {k.key: k.decode(others[k.key]) for k in held}
        current = self._values(incumbent)
        if any(k.type not in ("categorical", "bool") for k in mine):
            return None
        if all(g in LOCAL for g in stage.groups):
            combos = self._local_moves(mine, current)
        else:
            combos = [({}, values)]
            for (
                knob
            ) in mine:  # in sampling order: a condition's knob comes before the knobs it conditions
                allowed = (
                    search_choices(knob, current[knob.key]) if knob.key in current else knob.choices
                )
                grown = []
                for params, vals in combos:
                    if not knob.active(vals):
                        grown.append((params, vals))
                        continue
                    grown += [
                        ({**params, knob.key: knob.encode(c)}, {**vals, knob.key: c})
                        for c in allowed
                    ]
                combos = grown
                if len(combos) > MAX_ENUMERATED:
                    return None
        keys = {k.key for k in mine}
        tried = [
            {k: v for k, v in t.params.items() if k in keys}
            for t in study.get_trials(deepcopy=False)
            if t.state != TrialState.WAITING
            and all(t.params.get(k, v) == v for k, v in others.items())
        ]
        untried = [params for params, _ in combos if params not in tried]
        # one knob changed from the incumbent before two (a local search), the space's order within
        return sorted(
            untried, key=lambda p: sum(incumbent.params.get(k) != v for k, v in p.items())
        )

    @staticmethod
    def _local_moves(
        mine: list[Knob], current: dict[str, Any]
    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """The incumbent's values of the group, and each of them changed alone to a value it may take."""
        base = {k.key: k.encode(current[k.key]) for k in mine if k.key in current}
        moves = [(base, current)]
        for knob in mine:
            if knob.key in current:
                for c in (search_choices(knob, current[knob.key]) or ())[1:]:
                    moves.append(({**base, knob.key: knob.encode(c)}, {**current, knob.key: c}))
        return moves

    def _length(self, stage: Stage) -> int:
        return 1 if stage.kind in ("remedy", "remedies") else self.stage_trials

    def _values(self, incumbent: FrozenTrial) -> dict[str, Any]:
        """The incumbent's config values of the knobs it has (those that exist beside the others)."""
        return {
            k.key: k.decode(incumbent.params[k.key])
            for k in self.space.knobs
            if k.key in incumbent.params
        }

    def _remedies(self, group: str, incumbent: FrozenTrial) -> list[Knob]:
        """The group's knobs with a remedy that exist beside the incumbent's other values (with the
        group's remedies applied, in sampling order): DDP's own knobs do nothing in a whole-step graph."""
        return self._remedies_of([group], incumbent)

    def _remedies_of(self, groups: list[str], incumbent: FrozenTrial) -> list[Knob]:
        """:meth:`_remedies` of several groups applied together."""
        values = self._values(incumbent)
        held = self._fitted_by_ladder(incumbent)
        out = []
        for knob in self.space.knobs:
            if knob.key in held:
                continue
            if knob.group in groups and knob.remedy is not None and knob.active(values):
                values[knob.key] = knob.remedy
                out.append(knob)
        return out

    def _fitted_by_ladder(self, incumbent: FrozenTrial) -> set[str]:
        """Once stock did not fit (a ``memory`` stage): the ladder's knobs that the incumbent holds
        away from stock's values. Their remedies would undo the fit (fp32 moments for 8-bit ones)."""
        if self.stock is None or not any(s.kind == "memory" for s in self.stages):
            return set()
        return {
            k.key
            for k in self.space.knobs
            if k.key in fit.LADDER_KEYS
            and k.key in incumbent.params
            and k.decode(incumbent.params[k.key]) != get_value(self.stock, k.key)
        }

    def _settled(self, group: str, incumbent: FrozenTrial) -> bool:
        """Every knob of the group that exists beside the incumbent has a remedy, and the incumbent
        holds it: searching away from the rule comes last. On H200 studies of ``full`` searching
        the optimizer away from fused AdamW (foreach, loop) never paid: six trials, each pruned or
        stopped, two per 1-GPU study, which in a 510-s budget then reached neither compile nor a
        finished fp8 trial."""
        values = self._values(incumbent)
        mine = [k for k in self.space.knobs if k.group == group and k.active(values)]
        return bool(mine) and all(
            k.remedy is not None and incumbent.params.get(k.key) == k.encode(k.remedy) for k in mine
        )

    def _remedy_pending(self, group: str, incumbent: FrozenTrial) -> bool:
        """The group has remedies, none tried yet, and the incumbent does not already hold them."""
        if any(s.kind == "remedy" and group in s.groups for s in self.stages):
            return False
        return any(
            incumbent.params.get(k.key) != k.encode(k.remedy)
            for k in self._remedies(group, incumbent)
        )

    def _new_stage(self, study: optuna.Study, incumbent: FrozenTrial) -> Stage:
        self._close(study)
        explored = self._blocked(incumbent.number)
        have = {k.group for k in self.space.knobs}
        profile = profile_of(incumbent)
        number = len(self.stages) + 1
        common = {
            "stage": number,
            "incumbent": incumbent.number,
            "incumbent_samples_per_s": float(incumbent.value or 0.0),
            "profile": incumbent.user_attrs.get(PROFILE_DIR),
            "buckets": profile.buckets if profile else None,
            "dominant": profile.dominant if profile else None,
        }
        ranked = ranked_buckets(incumbent)
        loader_first = loader_stall(incumbent) >= MIN_SHARE  # then data_stall leads `ranked`
        together = self._together(ranked, have, incumbent)
        if together is not None:
            buckets, groups = together
            return Stage(
                bottleneck="+".join(buckets),
                share=ranked[0][1],
                groups=groups,
                knobs=[k.key for k in self._remedies_of(groups, incumbent)],
                kind="remedies",
                loader_bound=loader_first,
                **common,
            )
        for (
            bucket,
            share,
        ) in ranked:  # first the remedies of every bucket worth acting on, one trial each
            for group in BUCKET_GROUPS.get(bucket, ()):
                if group in have and self._remedy_pending(group, incumbent):
                    knobs = [k.key for k in self._remedies(group, incumbent)]
                    return Stage(
                        bottleneck=bucket,
                        share=share,
                        groups=[group],
                        knobs=knobs,
                        kind="remedy",
                        loader_bound=loader_first and bucket == "data_stall",
                        **common,
                    )
        searches = []
        for bucket, share in ranked:
            for group in BUCKET_GROUPS.get(bucket, ()):
                if group in have and group not in explored:
                    knobs = [k.key for k in self.space.knobs if k.group == group]
                    stage = Stage(
                        bottleneck=bucket,
                        share=share,
                        groups=[group],
                        knobs=knobs,
                        loader_bound=loader_first and bucket == "data_stall",
                        **common,
                    )
                    if (
                        self._searchable(group, incumbent)
                        and self._untried(study, stage, incumbent) != []
                    ):
                        # [] : every combination measured already
                        searches.append(stage)
        if (
            searches
        ):  # a group the incumbent holds at its remedies throughout is searched after the others
            return next(
                (st for st in searches if not self._settled(st.groups[0], incumbent)), searches[0]
            )
        return Stage(
            bottleneck=None,
            share=None,
            groups=[FREE],
            knobs=[k.key for k in self.space.knobs],
            kind="free",
            **common,
        )

    def _searchable(self, group: str, incumbent: FrozenTrial) -> bool:
        """Some knob of the group may take another value than the incumbent's in a search."""
        values = self._values(incumbent)
        return any(
            k.key not in values or len(search_choices(k, values[k.key]) or (0, 1)) > 1
            for k in self.space.knobs
            if k.group == group and (k.key in values or k.active(values))
        )

    def _together(
        self, ranked: list[tuple[str, float]], have: set[str], incumbent: FrozenTrial
    ) -> tuple[list[str], list[str]] | None:
        """The buckets and groups of a ``remedies`` stage: every pending remedy's, where there are two
        groups or more and no such stage ran in the study."""
        if not self.together or any(s.kind == "remedies" for s in self.stages):
            return None
        buckets: list[str] = []
        groups: list[str] = []
        for bucket, _ in ranked:
            for group in BUCKET_GROUPS.get(bucket, ()):
                if group in have and group not in groups and self._remedy_pending(group, incumbent):
                    groups.append(group)
                    if bucket not in buckets:
                        buckets.append(bucket)
        return (buckets, groups) if len(groups) >= 2 else None

    def _blocked(self, incumbent: int) -> set[str]:
        """Groups not to search now: those searched from this incumbent, the last stage's, and any
        searched twice. A group searched from an older incumbent may pay again once other knobs
        moved (more loader workers after CUDA graphs made the step shorter)."""
        searched = [s for s in self.stages if s.kind == "search"]
        blocked = {g for s in searched if s.incumbent == incumbent for g in s.groups}
        if searched and self.stages[-1] is searched[-1]:
            blocked |= set(searched[-1].groups)
        counts: dict[str, int] = {}
        for s in searched:
            for g in s.groups:
                counts[g] = counts.get(g, 0) + 1
        return blocked | {g for g, n in counts.items() if n >= 2}

    def record(self, study: optuna.Study, stage: Stage | None, trial: FrozenTrial) -> None:
        """Add a finished trial to its stage and update the stage's best and gain."""
        if stage is None:
            return
        stage.trials.append(trial.number)
        if stage.kind == "memory":
            stage.memory.append(fit.peak_line(trial, self.memory_budget))
        self._update(study, stage)
        self.save(study)

    def _close(self, study: optuna.Study) -> None:
        if self.stages:
            self._update(study, self.stages[-1])

    @staticmethod
    def _update(study: optuna.Study, stage: Stage) -> None:
        trials = [study.trials[n] for n in stage.trials if n < len(study.trials)]
        ok = [t for t in trials if eligible(t)]
        if ok:
            best = max(ok, key=lambda t: t.value)
            stage.best_trial, stage.best_samples_per_s = best.number, float(best.value)
            if stage.incumbent_samples_per_s:
                stage.gain = stage.best_samples_per_s / stage.incumbent_samples_per_s
