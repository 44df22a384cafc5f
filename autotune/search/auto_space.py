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
from autotune.search.space import SearchSpace, check_regions, parse_space

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
    """The facts of ``base``'s workload and preset (the model built on the meta device)."""
    from autotune.workloads import get_workload

    workload = get_workload(base.workload)
    model = workload.build_model(base.preset, "meta")
    regions = workload.regions(model)
    trains = {
        name: any(p.requires_grad for m in mods for p in m.parameters())
        for name, mods in regions.items()
    }
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
    check_regions(space, facts.regions, facts.workload)


def _choices(*lists: list[str]) -> list[list[str]]:
    """Distinct region lists, in order."""
    out: list[list[str]] = []
    for names in lists:
        if list(names) not in out:
            out.append(list(names))
    return out


def _data_knobs(machine: Machine) -> dict[str, Any]:
    per_rank = (machine.cpus or 1) // max(1, machine.world_size)
    high = max(2, min(16, per_rank))
    busy = list(range(1, high + 1))
    return {
        "data.num_workers": {
            "type": "int",
            "low": 0,
            "high": high,
            "group": "data",
            "remedy": "cores",
            "doc": "DataLoader worker processes",
        },
        "data.prefetch_factor": {
            "type": "categorical",
            "choices": [None, 2, 4],
            "when": {"data.num_workers": busy},
            "group": "data",
            "remedy": 4,
        },
        "data.persistent_workers": {
            "type": "bool",
            "when": {"data.num_workers": busy},
            "group": "data",
            "remedy": True,
        },
        "data.pin_memory": {"type": "bool", "requires": "cuda", "group": "data", "remedy": True},
        "data.device_prefetch": {
            "type": "int",
            "low": 0,
            "high": 4,
            "requires": "cuda",
            "group": "data",
            "remedy": 2,
        },
    }


def _graph_and_compile_knobs(f: WorkloadFacts, machine: Machine) -> dict[str, Any]:
    every = list(f.regions)
    singles = (
        [[r] for r in every]
        if len(every) <= MAX_SINGLE
        else [[r] for r in f.trainable[:MAX_SINGLE]]
    )
    regional = _choices([], *singles, every)
    knobs: dict[str, Any] = {
        "graphs.mode": {
            "type": "categorical",
            "choices": ["none", "regions", "step"],
            "requires": "cuda",
            "group": "graphs",
            "remedy": "step",
        },
        "graphs.regions": {
            "type": "categorical",
            "choices": _choices(*singles, list(f.trainable) or every, every),
            "when": {"graphs.mode": "regions"},
            "requires": "cuda",
            "group": "graphs",
        },
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
        len(every) > 1
    ):  # several ranks: block by block, so that gradients arrive (and reduce) as the backward goes
        knobs["compile.regions"]["remedy_several_ranks"] = every
    compiled = [c for c in regional if c] + [["all"]]
    knobs["compile.mode"] = {
        "type": "categorical",
        "choices": ["default", "max-autotune-no-cudagraphs"],
        "requires": "cuda",
        "when": {"compile.regions": compiled},
        "group": "compile",
    }
    if f.trainable:
        knobs["checkpointing.regions"] = {
            "type": "categorical",
            "group": "compile",
            "choices": _choices([], *[[r] for r in f.trainable], list(f.trainable)),
            "doc": "recompute the region's blocks in backward",
        }
    return knobs


def _precision_knobs(f: WorkloadFacts, machine: Machine) -> dict[str, Any]:
    knobs: dict[str, Any] = {}
    for region in f.regions:
        choices = (
            ["bf16", "fp32", "fp8"] if region in f.trainable and machine.cuda else ["bf16", "fp32"]
        )
        knob = {"type": "categorical", "choices": choices, "group": "precision"}
        if (
            machine.cuda
        ):  # bf16 autocast relieves a GPU's compute; on most CPUs it is slower than fp32
            knob["remedy"] = "bf16"
        knobs[f"precision.regions.{region}"] = knob
    if f.trainable:
        knobs["precision.trainable_dtype"] = {
            "type": "categorical",
            "choices": ["fp32", "bf16"],
            "group": "precision",
            "doc": "storage of trainable weights in autocast regions",
        }
    if f.frozen:
        knobs["precision.frozen_dtype"] = {
            "type": "categorical",
            "choices": ["bf16", "fp32"],
            "group": "precision",
        }
    knobs["precision.tf32"] = {
        "type": "bool",
        "requires": "cuda",
        "group": "precision",
        "remedy": True,
    }
    knobs["kernels.attention"] = {
        "type": "categorical",
        "choices": ["auto", "flash", "efficient", "cudnn", "math"],
        "requires": "cuda",
        "group": "compile",
    }
    return knobs


def _comm_knobs(machine: Machine) -> dict[str, Any]:
    eager = {"graphs.mode": ["none", "regions"]}
    return {
        "ddp.bucket_cap_mb": {"type": "float", "low": 1, "high": 400, "log": True, "group": "comm"},
        "ddp.static_graph": {"type": "bool", "when": eager, "group": "comm", "remedy": True},
        "ddp.gradient_as_bucket_view": {
            "type": "bool",
            "when": eager,
            "group": "comm",
            "remedy": True,
        },
        # gloo (CPU) has no bf16 compression hook
        "ddp.comm_hook": {
            "type": "categorical",
            "choices": ["none", "bf16", "fp16"] if machine.cuda else ["none", "fp16"],
            "group": "comm",
        },
        "ddp.graph_overlap": {
            "type": "bool",
            "requires": "cuda",
            "when": {"graphs.mode": "step"},
            "group": "comm",
            "remedy": True,
        },
    }


def auto_space_data(f: WorkloadFacts, machine: Machine) -> dict[str, Any]:
    """The space as the plain data of a space file (what ``autotune space`` prints)."""
    knobs: dict[str, Any] = {}
    if f.loads_data:
        knobs.update(_data_knobs(machine))
    knobs.update(_graph_and_compile_knobs(f, machine))
    knobs.update(_precision_knobs(f, machine))
    knobs["optimizer.impl"] = {
        "type": "categorical",
        "choices": ["foreach", "fused", "loop"],
        "group": "optimizer",
        "remedy": "fused",
    }
    if machine.world_size > 1:
        knobs.update(_comm_knobs(machine))
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
