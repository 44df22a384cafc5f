"""Which stage the guide runs next (:func:`new_stage`), from the incumbent's profile and the stages
run so far; the order is in :mod:`autotune.search.guide`."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.search.bottleneck import (
    BUCKET_GROUPS,
    MIN_SHARE,
    loader_short,
    loader_stall,
    ranked_buckets,
)
from autotune.search.candidates import remedies_of, searchable, settled, untried
from autotune.search.knobs import SearchSpace
from autotune.search.stage import FREE, Stage
from autotune.search.trials import PROFILE_DIR, profile_of


def new_stage(
    space: SearchSpace,
    stages: list[Stage],
    study: optuna.Study,
    incumbent: FrozenTrial,
    *,
    together: bool,
    fitted: Collection[str],
) -> Stage:
    """The stage to run next from the incumbent's profile: its pending remedies, else a search of
    the knob group of its largest bucket left, else the free search (see :mod:`autotune.search.guide`)."""
    have = {k.group for k in space.knobs}
    profile = profile_of(incumbent)
    number = len(stages) + 1
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
    stage = _remedy_stage(
        space, stages, ranked, have, incumbent, common, loader_first, together, fitted
    )
    if stage is None:
        stage = _search_stage(space, stages, study, ranked, have, incumbent, common, loader_first)
    if stage is not None:
        return stage
    return Stage(
        bottleneck=None,
        share=None,
        groups=[FREE],
        knobs=[k.key for k in space.knobs],
        kind="free",
        **common,
    )


def _remedy_stage(
    space: SearchSpace,
    stages: list[Stage],
    ranked: list[tuple[str, float]],
    have: set[str],
    incumbent: FrozenTrial,
    common: dict[str, Any],
    loader_first: bool,
    together: bool,
    fitted: Collection[str],
) -> Stage | None:
    """A ``remedies`` stage (:func:`remedies_together`), else a ``remedy`` stage for the first group of the
    ranked buckets whose remedy is pending; None: no remedy is."""
    both = remedies_together(space, stages, ranked, have, incumbent, fitted) if together else None
    if both is not None:
        buckets, groups, short = both
        return Stage(
            bottleneck="+".join(buckets),
            share=ranked[0][1],
            groups=groups,
            knobs=[k.key for k in remedies_of(space, groups, incumbent, fitted)],
            kind="remedies",
            loader_bound=loader_first,
            loader_short=list(short) if short else None,
            **common,
        )
    for (
        bucket,
        share,
    ) in ranked:  # first the remedies of every bucket worth acting on, one trial each
        for group in BUCKET_GROUPS.get(bucket, ()):
            if group in have and remedy_pending(space, stages, group, incumbent, fitted):
                knobs = [k.key for k in remedies_of(space, [group], incumbent, fitted)]
                return Stage(
                    bottleneck=bucket,
                    share=share,
                    groups=[group],
                    knobs=knobs,
                    kind="remedy",
                    loader_bound=loader_first and bucket == "data_stall",
                    **common,
                )
    return None


def _search_stage(
    space: SearchSpace,
    stages: list[Stage],
    study: optuna.Study,
    ranked: list[tuple[str, float]],
    have: set[str],
    incumbent: FrozenTrial,
    common: dict[str, Any],
    loader_first: bool,
) -> Stage | None:
    """A ``search`` stage of the first group of the ranked buckets not blocked (:func:`blocked`)
    with a combination left to measure, those the incumbent holds settled last; None: none is."""
    explored = blocked(stages, incumbent.number)
    searches = []
    for bucket, share in ranked:
        for group in BUCKET_GROUPS.get(bucket, ()):
            if group in have and group not in explored:
                knobs = [k.key for k in space.knobs if k.group == group]
                stage = Stage(
                    bottleneck=bucket,
                    share=share,
                    groups=[group],
                    knobs=knobs,
                    loader_bound=loader_first and bucket == "data_stall",
                    **common,
                )
                if (
                    searchable(space, group, incumbent)
                    and untried(space, study, stage, incumbent) != []
                ):
                    # [] : every combination measured already
                    searches.append(stage)
    if (
        searches
    ):  # a group the incumbent holds at its remedies throughout is searched after the others
        return next(
            (st for st in searches if not settled(space, st.groups[0], incumbent)),
            searches[0],
        )
    return None


def remedies_together(
    space: SearchSpace,
    stages: list[Stage],
    ranked: list[tuple[str, float]],
    have: set[str],
    incumbent: FrozenTrial,
    fitted: Collection[str],
) -> tuple[list[str], list[str], tuple[float, float] | None] | None:
    """The buckets and groups of a ``remedies`` stage: every pending remedy's, the loader's too where
    it is short of the step's compute ceiling (:func:`loader_short`, whose figures come third when
    it added them), where there are two groups or more and no such stage ran in the study."""
    if any(s.kind == "remedies" for s in stages):
        return None
    buckets: list[str] = []
    groups: list[str] = []
    for bucket, _ in ranked:
        for group in BUCKET_GROUPS.get(bucket, ()):
            if (
                group in have
                and group not in groups
                and remedy_pending(space, stages, group, incumbent, fitted)
            ):
                groups.append(group)
                if bucket not in buckets:
                    buckets.append(bucket)
    short = None
    if "data" in have and "data" not in groups:
        short = loader_short(incumbent)
        if short is not None and remedy_pending(space, stages, "data", incumbent, fitted):
            groups.append("data")  # the loader binds once the step is fast: see loader_short
            buckets.append("data_stall")
        else:
            short = None
    return (buckets, groups, short) if len(groups) >= 2 else None


def remedy_pending(
    space: SearchSpace,
    stages: list[Stage],
    group: str,
    incumbent: FrozenTrial,
    fitted: Collection[str],
) -> bool:
    """The group has remedies, none tried yet, and the incumbent does not already hold them."""
    if any(s.kind == "remedy" and group in s.groups for s in stages):
        return False
    return any(
        incumbent.params.get(k.key) != k.encode(k.remedy)
        for k in remedies_of(space, [group], incumbent, fitted)
    )


def blocked(stages: list[Stage], incumbent: int) -> set[str]:
    """Groups not to search now: those searched from this incumbent, the last stage's, and any
    searched twice. A group searched from an older incumbent may pay again once other knobs
    moved (more loader workers after CUDA graphs made the step shorter)."""
    searched = [s for s in stages if s.kind == "search"]
    blocked = {g for s in searched if s.incumbent == incumbent for g in s.groups}
    if searched and stages[-1] is searched[-1]:
        blocked |= set(searched[-1].groups)
    counts: dict[str, int] = {}
    for s in searched:
        for g in s.groups:
            counts[g] = counts.get(g, 0) + 1
    return blocked | {g for g, n in counts.items() if n >= 2}
