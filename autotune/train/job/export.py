"""``autotune export D/checkpoint-N --out DIR``: a job's checkpoint as an upstream checkpoint.

The checkpoint holds the trainable weights; the frozen ones are what the job started from. So the
model is built as the job built it (the configuration's seed, freezing and storage dtypes), set
from the job's ``--init-from`` checkpoint if it had one, overlaid with the checkpoint's weights, and
written through the workload's name map in Hugging Face's layout (``model.safetensors.index.json``
and shards, each tensor in the dtype training stored it in). The files of the ``--init-from`` folder
that are not weights (``config.json``, processor files) are copied beside them, so that the result
can stand in for the released checkpoint. A checkpoint whose workload names code
(``path/to/file.py:Class``, a job of the user's own workload) is exported only with ``--workload``
naming it: the folder is data, and never chooses code to import.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from autotune.config import TrainConfig
from autotune.config._strict import from_dict
from autotune.errors import ConfigError, short_repr
from autotune.train import knobs, precision
from autotune.train.job import checkpoint
from autotune.weights import INDEX, fingerprint, load_upstream, upstream_tensors, write_checkpoint
from autotune.workloads import get_workload
from autotune.workloads.registry import absolute_spec

_WEIGHT_FILE = re.compile(
    r"(model.*\.safetensors|model\.safetensors\.index\.json|pytorch_model.*\.bin)\Z"
)
_TRAINER_STATE = re.compile(
    r"(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state.*\.pth|trainer_state\.json|training_args\.bin)\Z"
)
"""A Hugging Face Trainer's ``checkpoint-N`` files: the state of the training that wrote the folder
(its optimizer's moments are twice the weights' size), not part of the model an export stands for."""


def _device_for(state: dict) -> torch.device:
    """Where the job initialised the model: a random initialisation is reproduced only there."""
    kind = state.get("init_device", "cpu")
    if kind == "cuda" and not state.get("init_from"):
        if not torch.cuda.is_available():
            raise ConfigError(
                "the job initialised its frozen weights at random on CUDA (no --init-from): export it "
                "on a machine with a GPU"
            )
        return torch.device("cuda", 0)
    return torch.device("cpu")


def build_trained_model(
    folder: Path, workload_spec: str | None = None
) -> tuple[torch.nn.Module, str]:
    """(the model the checkpoint in ``folder`` trained, its workload name), on the CPU.
    ``workload_spec``: the workload to build, where the checkpoint's names code (``--workload``)."""
    try:
        state = checkpoint.read_state(folder)
        loaded = checkpoint.load(folder)
    except checkpoint.CorruptCheckpoint as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(state.get("config"), dict):
        raise ConfigError(
            f"{folder / checkpoint.STATE}: config: no configuration in it; not a checkpoint of `autotune train`"
        )
    try:
        cfg = from_dict(TrainConfig, state["config"], "config")
    except ConfigError as exc:
        raise ConfigError(f"{folder / checkpoint.STATE}: {exc}") from None
    cfg.workload = _workload_to_run(folder, cfg.workload, workload_spec)
    workload = get_workload(cfg.workload)
    torch.manual_seed(
        cfg.seed
    )  # as Session does: the same random frozen weights without --init-from
    model = workload.build_model(cfg.preset, _device_for(state))
    regions = workload.regions(model)
    knobs.apply_trainability(regions, cfg)
    precision.set_param_dtypes(regions, cfg.precision)
    init = state.get("init_from")
    if init:
        path = Path(init["path"])
        if not path.is_dir():
            raise ConfigError(
                f"{folder} was trained from --init-from {path}, which export needs for the frozen "
                f"weights and is not there"
            )
        if fingerprint(path) != init["fingerprint"]:
            raise ConfigError(f"{path} no longer holds the weights {folder} was trained from")
        load_upstream(model, path, cfg.workload, cfg.preset)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    _check_trained(folder, params, loaded.weights, f"{cfg.workload}/{cfg.preset}")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(loaded.weights[name])
    return model.to("cpu"), cfg.workload


def _check_trained(
    folder: Path, params: dict[str, torch.nn.Parameter], weights: dict[str, torch.Tensor], of: str
) -> None:
    """The checkpoint's weights are the trainable parameters, each of its shape (``copy_`` would
    broadcast a smaller tensor into the parameter), or one ConfigError line naming those that are not."""
    missing, extra = sorted(params.keys() - weights.keys()), sorted(weights.keys() - params.keys())
    shapes = sorted(
        n for n in params.keys() & weights.keys() if params[n].shape != weights[n].shape
    )
    if missing or extra or shapes:
        raise ConfigError(
            f"{folder / checkpoint.WEIGHTS}: its weights are not the trainable parameters of {of} "
            f"under its configuration (missing {missing[:3]}, unexpected {extra[:3]}, misshapen "
            f"{shapes[:3]})"
        )


def _workload_to_run(folder: Path, recorded: str, given: str | None) -> str:
    """The workload to import: the checkpoint's when it is a name (built in, or of an installed
    package); where it names a file or module of code (``path/to/file.py:Class``), only as the
    command names it: a checkpoint someone hands over is data, never code to run."""
    if given is not None:
        return absolute_spec(given)
    if ":" in recorded:
        raise ConfigError(
            f"{folder / checkpoint.STATE}: workload: {short_repr(recorded, 200)} names code to "
            f"import, and a checkpoint never chooses code to run: give --workload {recorded} to "
            "run it"
        )
    return recorded


def export_checkpoint(
    folder: str | os.PathLike,
    out: str | os.PathLike,
    *,
    max_shard_bytes: int = 5 * 10**9,
    workload: str | None = None,
) -> dict:
    """Write the model of the job checkpoint ``folder`` into ``out`` in the upstream layout; the index."""
    folder, out = Path(folder), Path(out)
    if not (folder / checkpoint.STATE).is_file():
        raise ConfigError(
            f"{folder}: not a job checkpoint (no {checkpoint.STATE}); give D/checkpoint-<step>"
        )
    if checkpoint.checkpoints(out.parent) and checkpoint.step_of(out) is not None:
        raise ConfigError(
            f"--out {out}: a checkpoint's name in a job's folder, where the job would take the "
            "export for a corrupt checkpoint and delete it; give another --out"
        )
    checkpoint.check_outside(out, "--out")
    model, name = build_trained_model(folder, workload)
    return write_checkpoint(
        upstream_tensors(model, name),
        out,
        max_shard_bytes=max_shard_bytes,
        extra_files=_beside_weights(checkpoint.read_state(folder).get("init_from")),
    )


def _beside_weights(init: dict | None) -> list[Path]:
    """The files of the job's ``--init-from`` folder that are neither weights nor a trainer's state
    (``config.json``, the processor's): an export without them could not stand in for the released
    checkpoint."""
    if not init or not Path(init["path"]).is_dir():
        return []
    return [
        f
        for f in sorted(Path(init["path"]).iterdir())
        if f.is_file()
        and not _WEIGHT_FILE.match(f.name)
        and not _TRAINER_STATE.match(f.name)
        and f.name != INDEX
    ]
