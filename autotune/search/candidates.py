"""What a guided trial may try, read from the space and the incumbent: the incumbent's values,
the remedies it lacks, the combinations a search stage has left (:func:`untried`), and the
parameters a trial of a stage fixes (:func:`fixed_params`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import TrainConfig
from autotune.search import fit
from autotune.search.directions import LOCAL, search_choices
from autotune.search.knobs import Knob, SearchSpace, get_value
from autotune.search.stage import Stage

MAX_ENUMERATED = 32
"""A search stage enumerates a discrete group of at most this many combinations."""


def values_of(space: SearchSpace, incumbent: FrozenTrial) -> dict[str, Any]:
    """The incumbent's config values of the knobs it has (those that exist beside the others)."""
    return {
        k.key: k.decode(incumbent.params[k.key]) for k in space.knobs if k.key in incumbent.params
    }


def remedies_of(
    space: SearchSpace, groups: list[str], incumbent: FrozenTrial, fitted: Collection[str]
) -> list[Knob]:
    """The groups' knobs with a remedy that exist beside the incumbent's other values (with the
    groups' remedies applied, in sampling order): DDP's own knobs do nothing in a whole-step graph.
    The knobs in ``fitted`` (:func:`fitted_by_ladder`) are left out."""
    values = values_of(space, incumbent)
    out = []
    for knob in space.knobs:
        if knob.key in fitted:
            continue
        if knob.group in groups and knob.remedy is not None and knob.active(values):
            values[knob.key] = knob.remedy
            out.append(knob)
    return out


def fitted_by_ladder(
    space: SearchSpace, stock: TrainConfig | None, stages: list[Stage], incumbent: FrozenTrial
) -> set[str]:
    """Once stock did not fit (a ``memory`` stage): the ladder's knobs that the incumbent holds
    away from stock's values. Their remedies would undo the fit (fp32 moments for 8-bit ones)."""
    if stock is None or not any(s.kind == "memory" for s in stages):
        return set()
    return {
        k.key
        for k in space.knobs
        if k.key in fit.LADDER_KEYS
        and k.key in incumbent.params
        and k.decode(incumbent.params[k.key]) != get_value(stock, k.key)
    }


def settled(space: SearchSpace, group: str, incumbent: FrozenTrial) -> bool:
    """Every knob of the group that exists beside the incumbent has a remedy, and the incumbent
    holds it: searching away from the rule comes last. On H200 studies of ``full`` searching
    the optimizer away from fused AdamW (foreach, loop) never paid: six trials, each pruned or
    stopped, two per 1-GPU study, which in a 510-s budget then reached neither compile nor a
    finished fp8 trial."""
    values = values_of(space, incumbent)
    mine = [k for k in space.knobs if k.group == group and k.active(values)]
    return bool(mine) and all(
        k.remedy is not None and incumbent.params.get(k.key) == k.encode(k.remedy) for k in mine
    )


def searchable(space: SearchSpace, group: str, incumbent: FrozenTrial) -> bool:
    """Some knob of the group may take another value than the incumbent's in a search."""
    values = values_of(space, incumbent)
    return any(
        k.key not in values or len(search_choices(k, values[k.key]) or (0, 1)) > 1
        for k in space.knobs
        if k.group == group and (k.key in values or k.active(values))
    )


def fixed_params(
    space: SearchSpace,
    stock: TrainConfig | None,
    stage: Stage,
    incumbent: FrozenTrial,
    fitted: Collection[str],
) -> dict[str, Any]:
    """The Optuna parameters a trial of ``stage`` fixes: a remedy trial the remedies of its groups
    and every other knob at the incumbent's (those it brings into existence at stock's), a search
    the knobs of other groups and those it may not change."""
    fixed: dict[str, Any] = {}
    params = incumbent.params
    one_trial = stage.kind in ("remedy", "remedies")
    remedies = (
        {k.key for k in remedies_of(space, stage.groups, incumbent, fitted)} if one_trial else set()
    )
    values = values_of(space, incumbent)
    for knob in space.knobs:
        if knob.key in remedies:
            fixed[knob.key] = knob.encode(knob.remedy)
        elif (knob.group not in stage.groups or one_trial) and knob.key in params:
            fixed[knob.key] = params[knob.key]
        elif knob.key in params and len(search_choices(knob, values[knob.key]) or (0, 1)) == 1:
            fixed[knob.key] = params[
                knob.key
            ]  # a search keeps what it may not change (a held remedy)
    if one_trial:
        fixed.update(stock_beside(space, stock, fixed))
    return fixed


def stock_beside(
    space: SearchSpace, stock: TrainConfig | None, fixed: dict[str, Any]
) -> dict[str, Any]:
    """Stock's values of the knobs that ``fixed`` brings into existence and does not set: a remedy trial
    changes its remedies alone (a sampled ``compile.mode: max-autotune`` beside the whole model compiled
    once spent 427 s of a 10-minute study benchmarking GEMMs)."""
    if stock is None:
        return {}
    values = {k.key: k.decode(fixed[k.key]) for k in space.knobs if k.key in fixed}
    out = {}
    for knob in space.knobs:
        if knob.key in fixed or not knob.active(values):
            continue
        value = get_value(stock, knob.key)
        if knob.contains(value):
            values[knob.key] = value
            out[knob.key] = knob.encode(value)
    return out


def untried(
    space: SearchSpace,
    study: optuna.Study,
    stage: Stage,
    incumbent: FrozenTrial,
    stock: TrainConfig | None = None,
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
    mine = [k for k in space.knobs if k.group in stage.groups]
    held = [k for k in space.knobs if k.group not in stage.groups and k.key in incumbent.params]
    others = {k.key: incumbent.params[k.key] for k in held}
    values = {k.key: k.decode(others[k.key]) for k in held}
    current = values_of(space, incumbent)
    if any(k.type not in ("categorical", "bool") for k in mine):
        return None
    if local(stage):
        combos = local_moves(mine, current)
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
                    ({**params, knob.key: knob.encode(c)}, {**vals, knob.key: c}) for c in allowed
                ]
            combos = grown
            if len(combos) > MAX_ENUMERATED:
                return None
    keys = {k.key for k in mine}
    tried = [
        {k: v for k, v in t.params.items() if k in keys}
        for t in study.get_trials(deepcopy=False)
        if t.state != TrialState.WAITING and all(t.params.get(k, v) == v for k, v in others.items())
    ]
    brought = _brought_values(mine, current, stock)
    untried = [params for params, _ in combos if not _measured(params, tried, brought)]
    # one knob changed from the incumbent before two (a local search), the space's order within
    return sorted(untried, key=lambda p: sum(incumbent.params.get(k) != v for k, v in p.items()))


def _brought_values(
    mine: list[Knob], current: dict[str, Any], stock: TrainConfig | None
) -> dict[str, Any]:
    """The group's knobs the incumbent does not have, each at the Optuna value a trial that brings
    it into existence runs it with: stock's (as :func:`stock_beside` gives them); None where no stock
    configuration is given (any value then)."""
    out: dict[str, Any] = {}
    for knob in mine:
        if knob.key not in current:
            value = get_value(stock, knob.key) if stock is not None else None
            out[knob.key] = (
                knob.encode(value) if stock is not None and knob.contains(value) else None
            )
    return out


def _measured(params: dict[str, Any], tried: list[dict[str, Any]], brought: dict[str, Any]) -> bool:
    """Whether a trial measured ``params``: the same values, and beyond them only knobs the
    incumbent does not have, at the value a move that brings them into existence gives them (a
    local move from an incumbent without such a knob does not set it)."""

    def extra_ok(key: str, value: Any) -> bool:
        return key in brought and brought[key] in (None, value)

    return any(
        all(t.get(k) == v for k, v in params.items())
        and all(k in params or extra_ok(k, v) for k, v in t.items())
        for t in tried
    )


def local(stage: Stage) -> bool:
    """A stage of local groups only: each trial changes one of the incumbent's values (:data:`LOCAL`)."""
    return all(g in LOCAL for g in stage.groups)


def local_moves(
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
