"""The search space of any workload, made from its region map and the machine.

``autotune run --workload X`` searches it when no ``--space`` is given, and ``autotune space
--workload X`` prints it as YAML to edit. Every knob group that applies to any model is in it:

* data (when autotune loads the workload's dataset): workers up to the cores, prefetch, persistent
  workers; on a GPU pinned memory and the device prefetcher;
* graphs (GPU): none, per region or the whole step;
* compile: each region, every region block by block, the whole model (never the whole model with
  region graphs: the two are one ``@variant`` knob each side of the ``graphs.mode`` condition);
  activation checkpointing of each trainable region and of all of them;
* precision: bf16 or fp32 per region, bf16 trainable weights, frozen weights' dtype (where some
  region is frozen), TF32 and the attention backend (GPU);
* optimizer: the AdamW kernels;
* comm (several ranks): DDP's bucket size, static graph, gradient views, compression, and the
  all-reduce inside a whole-step graph.

Every choice is one the machine can run (``check_compatible`` refuses none of them), and every
range contains the workload's stock value, the first trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig
from autotune.config.compat import Machine
from autotune.config.knob import Declared, walk
from autotune.config.workload_knobs import model_knobs_of
from autotune.search.declared import MOST_CORES, entry
from autotune.search.knobs import SearchSpace
from autotune.search.space import check_model_knobs, check_regions, parse_space

MAX_SINGLE = 8
"""Regions offered one by one (for compile and region graphs) when the workload has at most this many."""


@dataclass(frozen=True)
class WorkloadFacts:
    """What the space is made from: the workload's regions, which train, and whether it loads data."""

    workload: str
    preset: str
    regions: tuple[str, ...]
    trainable: tuple[str, ...]
    frozen: tuple[str, ...]
    loads_data: bool
    stock: TrainConfig


def workload_facts(base: TrainConfig) -> WorkloadFacts:
    """The facts of ``base``'s workload and preset (:meth:`~autotune.workloads.base.Workload.region_trains`)."""
    from autotune.workloads import get_workload

    trains = get_workload(base.workload).region_trains(base.preset)
    regions = tuple(trains)
    for name in base.model.freeze:
        trains[name] = False
    for name in base.model.unfreeze:
        trains[name] = True
    return WorkloadFacts(
        workload=base.workload, preset=base.preset, regions=tuple(regions),
        trainable=tuple(r for r in regions if trains[r]), frozen=tuple(r for r in regions if not trains[r]),
        loads_data=base.data.source != "synthetic", stock=base,
    )  # fmt: skip


def check_space_regions(space: SearchSpace, facts: WorkloadFacts) -> None:
    """Refuse a space naming a region or a model knob the workload does not have."""
    from autotune.workloads import get_workload

    check_regions(space, facts.regions, facts.workload)
    check_model_knobs(space, get_workload(facts.workload).model_knobs, facts.workload)


def _choices(*lists: list[str]) -> list[list[str]]:
    """Distinct region lists, in order."""
    out: list[list[str]] = []
    for names in lists:
        if list(names) not in out:
            out.append(list(names))
    return out


GROUP_ORDER = (
    "data",
    "graphs",
    "compile",
    "memory",
    "precision",
    "kernels",
    "optimizer",
    "model",
    "ddp",
)
"""The order of the groups in the space: a knob's conditions come before it."""


def _applies(key: str, group: str, f: WorkloadFacts, machine: Machine) -> bool:
    """Whether a declared knob belongs in this workload's space on this machine."""
    if group == "data":
        return f.loads_data
    if group == "ddp" or key == "kernels.cuda_device_max_connections":
        return machine.world_size > 1  # communication knobs, for several ranks
    if key == "precision.trainable_dtype":
        return bool(f.trainable)
    if key == "precision.frozen_dtype":
        return bool(f.frozen)
    return True


def _declared(f: WorkloadFacts, machine: Machine) -> list[Declared]:
    found = list(walk(TrainConfig))
    own = model_knobs_of(f.workload)
    if own is not None:
        found += list(walk(own, "model"))
    found = [d for d in found if d.spec.search is not None and d.spec.group is not None]
    found = [d for d in found if _applies(d.key, d.spec.group, f, machine)]
    return sorted(found, key=lambda d: GROUP_ORDER.index(d.spec.group))


def _for_machine(d: Declared, machine: Machine) -> dict[str, Any]:
    """The declared entry with what depends on the machine resolved: the loader's cores, choices
    that need CUDA or one process, the conditions of several ranks."""
    knob = entry(d)
    if knob.get("high") == "cores":
        per_rank = (machine.cpus or 1) // max(1, machine.world_size)
        knob["high"] = max(2, min(MOST_CORES, per_rank))
    search = d.spec.search
    if machine.world_size > 1 and search.when_several_ranks:
        knob["when"] = {**knob.get("when", {}), **search.when_several_ranks}
    lacking = {"cuda"} if not machine.cuda else set()
    if "choices" in knob:
        drop = {c for c, what in search.choice_needs.items() if what in lacking}
        if machine.world_size > 1:
            drop |= {
                c
                for c in knob["choices"]
                for n in d.spec.needs
                if n.what == "one_process" and n.applies(c)
            }
        knob["choices"] = [c for c in knob["choices"] if c not in drop]
        if knob.get("remedy") in drop:
            del knob["remedy"]
    return knob


def _resolve_when(knobs: dict[str, Any]) -> dict[str, Any]:
    """Conditions on a loader with workers ("busy") made explicit; knobs whose condition no earlier
    knob can meet left out."""
    out: dict[str, Any] = {}
    for key, knob in knobs.items():
        when = dict(knob.get("when", {}))
        if when.get("data.num_workers") == "busy" and "data.num_workers" in out:
            when["data.num_workers"] = list(range(1, out["data.num_workers"]["high"] + 1))
        if all(c in out and _meets(out[c], v) for c, v in when.items()):
            out[key] = {**knob, "when": when} if when else knob
    return out


def _meets(cond: dict[str, Any], values: Any) -> bool:
    values = values if isinstance(values, list) else [values]
    if "choices" in cond:
        return any(v in cond["choices"] for v in values)
    return cond["type"] != "bool" or any(isinstance(v, bool) for v in values)


def _graph_regions(f: WorkloadFacts) -> tuple[dict[str, Any], list[list[str]]]:
    every = list(f.regions)
    singles = (
        [[r] for r in every]
        if len(every) <= MAX_SINGLE
        else [[r] for r in f.trainable[:MAX_SINGLE]]
    )
    regional = _choices([], *singles, every)
    graphs = {
        "graphs.regions": {
            "type": "categorical",
            "choices": _choices(*singles, list(f.trainable) or every, every),
            "when": {"graphs.mode": "regions"},
            "requires": "cuda",
            "group": "graphs",
        }
    }
    return graphs, regional


def _compile_regions(f: WorkloadFacts, regional: list[list[str]]) -> dict[str, Any]:
    knobs: dict[str, Any] = {
        # the whole model compiled is one graph: no region of it can be captured on its own
        "compile.regions": {
            "type": "categorical",
            "choices": [*regional, ["all"]],
            "when": {"graphs.mode": ["none", "step"]},
            "group": "compile",
            "remedy": ["all"],
        },
        "compile.regions@region_graphs": {
            "type": "categorical",
            "choices": regional,
            "when": {"graphs.mode": "regions"},
            "requires": "cuda",
            "group": "compile",
        },
    }
    if (
        len(f.regions) > 1
    ):  # several ranks: block by block, so gradients reduce as the backward goes
        knobs["compile.regions"]["remedy_several_ranks"] = list(f.regions)
    return knobs


def _region_knobs(f: WorkloadFacts, machine: Machine) -> dict[str, dict[str, Any]]:
    """The knobs whose choices are the workload's regions, by the group they open."""
    graphs, regional = _graph_regions(f)
    memory: dict[str, Any] = {}
    if f.trainable:
        choices = _choices([], *[[r] for r in f.trainable], list(f.trainable))
        memory["checkpointing.regions"] = {
            "type": "categorical",
            "group": "memory",
            "choices": choices,
            "doc": "recompute the region's blocks in backward",
        }
        memory["checkpointing.every"] = {
            "type": "categorical",
            "group": "memory",
            "choices": [1, 2, 4],
            "when": {"checkpointing.regions": [c for c in choices if c]},
            "doc": "recompute one block in this many of the checkpointed regions",
        }
    precision: dict[str, Any] = {}
    for region in f.regions:
        fp8 = region in f.trainable and machine.cuda
        knob = {"type": "categorical", "choices": ["bf16", "fp32", *(["fp8"] if fp8 else [])]}
        knob["group"] = "precision"
        if (
            machine.cuda
        ):  # bf16 autocast relieves a GPU's compute; on most CPUs it is slower than fp32
            knob["remedy"] = "bf16"
        precision[f"precision.regions.{region}"] = knob
    compiled = [c for c in regional if c] + [["all"]]
    return {
        "graphs": graphs,
        "compile": {
            **_compile_regions(f, regional),
            "compile.mode": {"when": {"compile.regions": compiled}},
        },
        "memory": memory,
        "precision": precision,
    }


def auto_space_data(f: WorkloadFacts, machine: Machine) -> dict[str, Any]:
    """The space as the plain data of a space file (what ``autotune space`` prints): every declared
    knob with a search range that applies, and the knobs whose choices are the workload's regions."""
    regions = _region_knobs(f, machine)
    knobs: dict[str, Any] = {}
    declared = _declared(f, machine)
    for group in GROUP_ORDER:
        extra = regions.get(group, {})
        own = {k: v for k, v in extra.items() if "type" in v}
        if group == "compile":  # compile.mode is conditioned on the compiled regions
            knobs.update(own)
        for d in (d for d in declared if d.spec.group == group):
            knob = {**_for_machine(d, machine), **extra.get(d.key, {})}
            if len(knob.get("choices", (0, 1))) > 1:  # a choice of one is no knob
                knobs[d.key] = knob
        knobs.update(own)
    knobs = _resolve_when(knobs)
    where = "a GPU" if machine.cuda else "the CPU"
    return {
        "name": "auto",
        "description": f"every knob group of workload {f.workload!r} ({f.preset}) on {where}, "
        f"{machine.world_size} rank(s), from its regions {list(f.regions)}",
        "knobs": knobs,
    }


def auto_space(f: WorkloadFacts, machine: Machine) -> SearchSpace:
    """The space of :func:`auto_space_data`, validated as a space file is."""
    data = auto_space_data(f, machine)
    return parse_space(data, Path(f"<space {data['name']}>"))
