"""The knobs of a configuration that carry over to Hugging Face's ``Trainer``, and those that do not.

    python -m autotune trainer-args --config runs/.../best.yaml            # TrainingArguments keyword arguments
    python -m autotune trainer-args --config best.yaml --json              # {"training_arguments": ..., "not_carried": ...}

``trainer_arguments(cfg)`` maps each knob to ``transformers.TrainingArguments`` fields: the loader's
workers, prefetch, pinned memory and persistent workers; ``torch_compile`` (the whole model) and its
mode; fused AdamW (``optim="adamw_torch_fused"``); DDP's bucket size, static graph and buffer
broadcast; gradient checkpointing; bf16 or fp16 autocast and TF32; the batch and seed. Knobs the
``Trainer`` has no field for are listed with the reason (CUDA graphs, the in-graph reducer, the
device prefetcher, per-region precision and compile, ...): with them, use ``autotune.prepare`` in
your own loop instead. The optimizer's hyper-parameters are your training's, not knobs: they are
not exported.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

from autotune.config import TrainConfig, load_config


@dataclass
class TrainerExport:
    training_arguments: dict[str, Any]
    """Keyword arguments of ``transformers.TrainingArguments`` (besides ``output_dir``)."""
    not_carried: dict[str, str] = field(default_factory=dict)
    """Dotted knob -> why the ``Trainer`` cannot apply it."""

    def to_dict(self) -> dict[str, Any]:
        return {"training_arguments": self.training_arguments, "not_carried": self.not_carried}


def _data(cfg: TrainConfig, args: dict[str, Any], lost: dict[str, str]) -> None:
    d = cfg.data
    # pinned memory and TF32 apply on CUDA only (as autotune applies them), and the Trainer refuses them on a CPU
    args.update(
        dataloader_num_workers=d.num_workers,
        dataloader_pin_memory=d.pin_memory and cfg.device != "cpu",
    )
    if d.num_workers:
        args.update(dataloader_persistent_workers=d.persistent_workers)
        if d.prefetch_factor is not None:
            args["dataloader_prefetch_factor"] = d.prefetch_factor
        if d.multiprocessing_context != "fork":
            lost["data.multiprocessing_context"] = (
                "the Trainer's DataLoader uses the platform's start method"
            )
    if d.device_prefetch:
        lost["data.device_prefetch"] = (
            "the Trainer has no device prefetcher (host-to-device copies on a side stream)"
        )


def _compile(cfg: TrainConfig, args: dict[str, Any], lost: dict[str, str]) -> None:
    c = cfg.compile
    if c.regions == ["all"]:
        args["torch_compile"] = True
        if c.mode != "default":
            args["torch_compile_mode"] = c.mode
    elif c.regions:
        lost["compile.regions"] = (
            f"the Trainer compiles the whole model only, not the regions {c.regions}"
        )
    if cfg.checkpointing.regions:
        args["gradient_checkpointing"] = True
        lost["checkpointing.regions"] = (
            f"the Trainer checkpoints every layer of a transformers model, not the regions "
            f"{cfg.checkpointing.regions} only (exported as gradient_checkpointing: true)"
        )
    if cfg.graphs.mode != "none":
        lost["graphs.mode"] = f"the Trainer does not capture CUDA graphs ({cfg.graphs.mode!r})"
    if cfg.kernels.attention != "auto":
        lost["kernels.attention"] = (
            "choose the attention kernel with the model's attn_implementation instead"
        )
    if cfg.kernels.cuda_device_max_connections is not None:
        lost["kernels.cuda_device_max_connections"] = (
            "set CUDA_DEVICE_MAX_CONNECTIONS in the environment instead"
        )
    if cfg.kernels.cublaslt_workspace_kib is not None:
        lost["kernels.cublaslt_workspace_kib"] = (
            "set CUBLASLT_WORKSPACE_SIZE in the environment instead"
        )


def _precision(cfg: TrainConfig, args: dict[str, Any], lost: dict[str, str]) -> None:
    p = cfg.precision
    if cfg.device != "cpu":
        args["tf32"] = p.tf32
    if p.default in ("bf16", "fp16"):
        args[p.default] = True
    elif p.default == "fp8":
        lost["precision.default"] = (
            "the Trainer has no fp8 training of its own (see accelerate's fp8 recipes)"
        )
    if p.regions:
        lost["precision.regions"] = (
            f"the Trainer runs the whole model in one precision, not per region {p.regions}"
        )
    if p.trainable_dtype != "fp32":
        lost["precision.trainable_dtype"] = (
            "load the model in bf16 (torch_dtype) instead: the Trainer keeps its dtype"
        )
    if p.frozen_dtype != "fp32" and cfg.model.freeze:
        lost["precision.frozen_dtype"] = (
            "the Trainer does not store frozen weights in another dtype"
        )


def _optimizer_and_ddp(cfg: TrainConfig, args: dict[str, Any], lost: dict[str, str]) -> None:
    args["optim"] = "adamw_torch_fused" if cfg.optimizer.impl == "fused" else "adamw_torch"
    impl = cfg.optimizer.impl
    if impl == "loop":
        lost["optimizer.impl"] = (
            "the Trainer's torch AdamW picks its for-each kernels; it has no per-parameter loop"
        )
    elif impl in ("compiled", "master"):
        lost["optimizer.impl"] = (
            f"{impl!r} is autotune's own AdamW; the Trainer steps torch's over fp32 weights"
            + (" (no bf16 weights with fp32 masters)" if impl == "master" else "")
        )
    if cfg.optimizer.streams > 1:
        lost["optimizer.streams"] = "the Trainer steps its AdamW on one stream"
    if cfg.optimizer.overlap:
        lost["optimizer.overlap"] = (
            "the update beside the next step's frozen prefix runs in autotune's captured step"
        )
    ddp = cfg.ddp
    args.update(
        ddp_bucket_cap_mb=max(1, round(ddp.bucket_cap_mb)),
        ddp_broadcast_buffers=ddp.broadcast_buffers,
    )
    if ddp.static_graph:
        args["ddp_static_graph"] = True
    if ddp.gradient_as_bucket_view:
        lost["ddp.gradient_as_bucket_view"] = (
            "the Trainer has no field for DDP's gradient_as_bucket_view"
        )
    if ddp.comm_hook != "none":
        lost["ddp.comm_hook"] = (
            f"register DDP's {ddp.comm_hook}_compress_hook on the wrapped model yourself"
        )
    if ddp.graph_overlap:
        lost["ddp.graph_overlap"] = (
            "the in-graph reducer (all-reduce inside the captured step) is autotune's own"
        )


def trainer_arguments(cfg: TrainConfig) -> TrainerExport:
    """``cfg``'s knobs as ``TrainingArguments`` fields, and the knobs that do not carry over (see the module)."""
    args: dict[str, Any] = {"per_device_train_batch_size": cfg.batch_size, "seed": cfg.seed}
    if cfg.device == "cpu":
        args["use_cpu"] = True
    lost: dict[str, str] = {}
    for part in (_data, _compile, _precision, _optimizer_and_ddp):
        part(cfg, args, lost)
    return TrainerExport(args, lost)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trainer-args",
        help="the knobs of a configuration as Hugging Face TrainingArguments, and those that "
        "do not carry over",
    )
    p.add_argument("--config", required=True, help="configuration YAML (e.g. a run's best.yaml)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    export = trainer_arguments(load_config(args.config))
    if args.json:
        print(json.dumps(export.to_dict()))
        return 0
    kwargs = ", ".join(f"{k}={v!r}" for k, v in export.training_arguments.items())
    print(f"TrainingArguments(output_dir=..., {kwargs})")
    for key, why in export.not_carried.items():
        print(f"not carried: {key}: {why}")
    return 0
