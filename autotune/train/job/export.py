"""``autotune export D/checkpoint-N --out DIR``: a job's checkpoint as an upstream checkpoint.

The checkpoint holds the trainable weights; the frozen ones are what the job started from. So the
model is built as the job built it (the configuration's seed, freezing and storage dtypes), set
from the job's ``--init-from`` checkpoint if it had one, overlaid with the checkpoint's weights, and
written through the workload's name map in Hugging Face's layout (``model.safetensors.index.json``
and shards, each tensor in the dtype training stored it in). The files of the ``--init-from`` folder
that an upstream checkpoint holds beside its weights (``config.json``, the processor's files:
:data:`BESIDE_WEIGHTS`) are copied beside them, so that the result can stand in for the released
checkpoint; the others are named on one line. A checkpoint whose workload names code
(``path/to/file.py:Class``, a job of the user's own workload) is exported only with ``--workload``
naming it: the folder is data, and never chooses code to import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from autotune.config import TrainConfig
from autotune.config._strict import from_dict
from autotune.errors import ConfigError, WorkloadError, listed, short_repr
from autotune.train import knobs, precision
from autotune.train.job import checkpoint
from autotune.train.job.folder import is_job_folder
from autotune.weights import (
    fingerprint,
    load_upstream,
    upstream_tensors,
    weight_files,
    write_checkpoint,
)
from autotune.workloads import get_workload
from autotune.workloads.registry import absolute_spec

BESIDE_WEIGHTS = frozenset(
    {
        # GR00T N1.6's and N1.7's released folders: the model's configuration, the processor's
        # (its settings, the datasets' statistics, the embodiment tags' projector slots), the
        # model card and its licence
        "config.json",
        "processor_config.json",
        "statistics.json",
        "embodiment_id.json",
        "README.md",
        "LICENSE",
        # what transformers' save_pretrained writes beside a model's weights (its generation
        # settings, a processor's and a tokenizer's files), where a folder has them
        "generation_config.json",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "chat_template.json",
        "chat_template.jinja",
    }
)
"""The files of an ``--init-from`` folder that an export copies beside its weights: those an
upstream checkpoint holds there. Anything else a folder holds (a ``.env`` of tokens, a stray
``consolidated.safetensors``, a Trainer's optimizer state) is not part of the model."""


@dataclass(frozen=True)
class Exported:
    index: dict
    """The written checkpoint's ``model.safetensors.index.json``."""
    left_out: str | None = None
    """One line naming the files of the ``--init-from`` folder not copied beside the weights."""


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
    cfg = _config_of(folder, state, workload_spec)
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


def _config_of(folder: Path, state: dict, workload_spec: str | None) -> TrainConfig:
    """The configuration the checkpoint's state records, its workload the one to run."""
    where = folder / checkpoint.STATE
    data = state.get("config")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: config: no configuration in it; not a checkpoint of `autotune train`"
        )
    recorded = data.get("workload", TrainConfig.workload)
    if workload_spec is None and isinstance(recorded, str) and ":" not in recorded:
        try:  # first: the model knobs it records are known only by a known workload
            get_workload(recorded)
        except WorkloadError as exc:
            raise WorkloadError(f"{where}: config.workload: {exc}") from None
    try:
        cfg = from_dict(TrainConfig, data, "config")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    cfg.workload = _workload_to_run(folder, cfg.workload, workload_spec)
    return cfg


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
) -> Exported:
    """Write the model of the job checkpoint ``folder`` into ``out`` in the upstream layout, with
    the files of its ``--init-from`` folder that belong beside the weights."""
    folder, out = Path(folder), Path(out)
    if not (folder / checkpoint.STATE).is_file():
        raise ConfigError(
            f"{folder}: not a job checkpoint (no {checkpoint.STATE}); give D/checkpoint-<step>"
        )
    _check_not_the_jobs(out)
    checkpoint.check_outside(out, "--out")
    model, name = build_trained_model(folder, workload)
    init = checkpoint.read_state(folder).get("init_from")
    copied, left_out = _beside_weights(Path(init["path"])) if init else ([], [])
    index = write_checkpoint(
        upstream_tensors(model, name), out, max_shard_bytes=max_shard_bytes, extra_files=copied
    )
    return Exported(index, _left_out_line(init["path"], left_out) if left_out else None)


def _left_out_line(init: str, names: list[str]) -> str:
    return (
        f"{init} (--init-from): {listed('files left out of the export', names, 8)}: only what an "
        "upstream checkpoint holds beside its weights is copied (config.json, processor, "
        "tokenizer and model card files), never a dotfile, a link leading out of the folder or "
        "what is not a file"
    )


def _check_not_the_jobs(out: Path) -> None:
    """ConfigError where ``out`` is in a job's folder (one with checkpoints, or a job's log) under
    the name of a checkpoint or of the temporary folder of one, which the job deletes."""
    parent = Path(os.path.abspath(out)).parent
    if not (checkpoint.checkpoints(parent) or is_job_folder(parent)):
        return
    if checkpoint.step_of(out) is not None:
        what, taken = "a checkpoint's name", "a corrupt"
    elif checkpoint.is_partial(out):
        what, taken = "a temporary checkpoint's name", "an unfinished"
    else:
        return
    raise ConfigError(
        f"--out {out}: {what} in a job's folder, where the job would take the export for {taken} "
        "checkpoint and delete it; give another --out"
    )


def _beside_weights(init: Path) -> tuple[list[Path], list[str]]:
    """(the files of the job's ``--init-from`` folder to copy beside the export's weights, the
    names of the others that are not its weights): a file of :data:`BESIDE_WEIGHTS` that is a
    regular file in the folder, or a link to one there; an export without them could not stand in
    for the released checkpoint."""
    weights = {p.name for p in weight_files(init)}
    copied, left_out = [], []
    for f in sorted(init.iterdir()):
        if f.name in weights:
            continue
        if f.name in BESIDE_WEIGHTS and _file_in(f, init):
            copied.append(f)
        else:
            left_out.append(f.name)
    return copied, left_out


def _file_in(path: Path, folder: Path) -> bool:
    """``path`` is a regular file in ``folder``, or a link to one there or to a blob of the Hugging
    Face cache the folder is a snapshot of (never to a secret elsewhere, a device or a pipe that a
    copy would read for ever)."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # a broken link, a loop (RuntimeError before Python 3.13)
        return False
    home = folder.resolve()
    return target.is_file() and target.parent in (home, _cache_blobs(home))


def _cache_blobs(snapshot: Path) -> Path | None:
    """``REPO/blobs`` where ``snapshot`` is ``REPO/snapshots/REVISION`` of the Hugging Face cache
    (``models--nvidia--GR00T-N1.7-3B``), whose files are links to the repository's blobs."""
    repo = snapshot.parent.parent
    if snapshot.parent.name == "snapshots" and repo.name.startswith("models--"):
        return repo / "blobs"
    return None
