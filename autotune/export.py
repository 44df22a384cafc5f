"""The knobs of a configuration that carry over to Hugging Face's ``Trainer``, and those that do not.

    python -m autotune trainer-args --config runs/.../best.yaml            # TrainingArguments keyword arguments
    python -m autotune trainer-args --config best.yaml --json              # {"training_arguments": ..., "not_carried": ...}

``trainer_arguments(cfg, cuda)`` maps every knob by its declaration (:mod:`autotune.config.knob`):
a knob the ``Trainer`` has a field for is carried (the loader's workers, prefetch, pinned memory
and persistent workers; ``torch_compile`` and its mode; the AdamW kind and its hyper-parameters,
learning rate, betas, epsilon, weight decay, schedule, warm-up, length and clipping; DDP's bucket
size, static graph and buffer broadcast; gradient checkpointing; bf16 or fp16 autocast and TF32;
the batch and seed); every other one whose value differs from what the ``Trainer`` does anyway is
listed in ``not_carried`` with the reason (CUDA graphs, the in-graph reducer, the device
prefetcher, per-region precision and compile, a workload's own model knobs, ...): with them, use
``autotune.prepare`` in your own loop instead. Fields the ``Trainer`` refuses without CUDA (TF32,
fp16, pinned memory) are left out, and said so, for a machine without it (``--for cpu``; the
default is the machine the command runs on).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

from autotune.config import TrainConfig, load_config
from autotune.config.compat import get_value
from autotune.config.knob import Carried, Declared, NotCarried, not_carried_value, walk
from autotune.errors import AutotuneError, ConfigError


@dataclass
class TrainerExport:
    training_arguments: dict[str, Any]
    """Keyword arguments of ``transformers.TrainingArguments`` (besides ``output_dir``)."""
    not_carried: dict[str, str] = field(default_factory=dict)
    """Dotted knob -> why the ``Trainer`` cannot apply it."""

    def to_dict(self) -> dict[str, Any]:
        return {"training_arguments": self.training_arguments, "not_carried": self.not_carried}


def declared_knobs(cfg: TrainConfig) -> list[Declared]:
    """Every knob of ``cfg``: the generic tree's and its workload's model knobs."""
    found = list(walk(TrainConfig))
    if cfg.model.options is not None:
        found += list(walk(type(cfg.model.options), "model"))
    return found


def _carry(
    d: Declared, value: Any, cfg: TrainConfig, cuda: bool
) -> tuple[dict[str, Any], str | None]:
    """The fields a knob's value sets, and what of it is lost (None: nothing)."""
    hf = d.spec.hf
    if isinstance(hf, NotCarried):
        return {}, None if value == not_carried_value(d.spec, d.default) else hf.reason
    if isinstance(hf, Carried):
        if hf.needs_cuda and not cuda:
            lost = (
                None
                if value == d.default and not value
                else f"{hf.field} needs CUDA, which this machine has not"
            )
            return {}, lost
        carried = hf.value(value, cfg)
        return ({} if carried is None else {hf.field: carried}), None
    return hf(value, cfg, cuda)


def trainer_arguments(cfg: TrainConfig, cuda: bool = True) -> TrainerExport:
    """``cfg``'s knobs as ``TrainingArguments`` fields for a machine with (``cuda``) or without CUDA,
    and the knobs that do not carry over with the reason; every declared knob is one or the other."""
    args: dict[str, Any] = {}
    lost: dict[str, str] = {}
    for d in declared_knobs(cfg):
        fields, why = _carry(d, get_value(cfg, d.key), cfg, cuda)
        args.update(fields)
        if why:
            lost[d.key] = why
    return TrainerExport(args, lost)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trainer-args",
        help="the knobs of a configuration as Hugging Face TrainingArguments, and those that "
        "do not carry over",
    )
    p.add_argument("--config", required=True, help="configuration YAML (e.g. a run's best.yaml)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--for",
        dest="target",
        choices=("cuda", "cpu"),
        help="the machine the Trainer will run on (default: this one)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.target is None:
        import torch  # the machine the Trainer will run on: this one

        cuda = torch.cuda.is_available()
    else:
        cuda = args.target == "cuda"
    cfg = load_config(args.config)
    _check_workload(cfg, args.config)
    export = trainer_arguments(cfg, cuda=cuda)
    if args.json:
        print(json.dumps(export.to_dict()))
        return 0
    kwargs = ", ".join(f"{k}={v!r}" for k, v in export.training_arguments.items())
    print(f"TrainingArguments(output_dir=..., {kwargs})")
    for key, why in export.not_carried.items():
        print(f"not carried: {key}: {why}")
    return 0


def _check_workload(cfg: TrainConfig, path: str) -> None:
    """A registered workload and one of its presets: the arguments are of a model that exists (a
    workload named ``module:Class`` is not imported to print them: its code is not run here)."""
    if ":" in cfg.workload:
        return
    from autotune.workloads import get_workload

    try:
        get_workload(cfg.workload).check_preset(cfg.preset)
    except AutotuneError as exc:
        raise ConfigError(f"{path}: {exc}") from None
