"""Token windows read from a memory-mapped shard on disk.

A shard is a folder with ``tokens.bin`` (the token ids, little-endian ``uint16`` or ``uint32``) and
``meta.json`` (``{"dtype": "uint16", "vocab_size": N, "tokens": T}``). With ``data.dataset`` null
the workload makes one once in the cache: text-like token streams of phrases drawn with Zipf's law
from a fixed table (a model can learn them: its loss falls), ``preset.windows`` windows long.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from autotune.data.cache import cache_folder
from autotune.errors import DataError
from autotune.workloads.hf_causal_lm.presets import LMPreset
from autotune.workloads.hf_common import make_once

TOKENS, META = "tokens.bin", "meta.json"
SHARD_SEED = 0


def write_shard(folder: Path, vocab_size: int, tokens: int, seed: int = SHARD_SEED) -> None:
    """A shard of ``tokens`` ids below ``vocab_size``: phrases of 2-12 tokens, drawn by Zipf's law."""
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, vocab_size, rng.integers(2, 13)) for _ in range(4096)]
    weights = 1.0 / np.arange(1, len(phrases) + 1)
    draws = rng.choice(len(phrases), size=tokens // 4 + 16, p=weights / weights.sum())
    stream = np.concatenate([phrases[i] for i in draws])[:tokens]
    dtype = "uint16" if vocab_size <= 2**16 else "uint32"
    stream.astype(dtype).tofile(folder / TOKENS)
    (folder / META).write_text(
        json.dumps({"dtype": dtype, "vocab_size": vocab_size, "tokens": int(stream.size)})
    )


def shard_folder(preset: LMPreset, dataset: str | None) -> Path:
    if dataset:
        return Path(dataset)
    tokens = preset.windows * preset.seq_len + 1
    name = f"tokens-v{preset.vocab_size}-t{tokens}-seed{SHARD_SEED}"
    return make_once(
        cache_folder("datasets") / name, lambda d: write_shard(d, preset.vocab_size, tokens)
    )


class TokenWindows(torch.utils.data.Dataset):
    """``self[i]`` is window ``i`` of the shard: ``input_ids`` and ``labels`` of ``seq_len`` tokens
    (the model shifts the labels itself). The file is mapped once in each process that reads it."""

    def __init__(self, folder: Path, seq_len: int, vocab_size: int) -> None:
        meta_path = folder / META
        try:
            meta = json.loads(meta_path.read_text())
            self.dtype, self.tokens = np.dtype(meta["dtype"]), int(meta["tokens"])
        except FileNotFoundError:
            raise DataError(
                f"{meta_path}: no such file; a token shard is a folder with {TOKENS} and {META}"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(
                f"{meta_path}: not a token shard's meta ({exc}); it holds dtype, vocab_size, tokens"
            ) from None
        if int(meta.get("vocab_size", 0)) > vocab_size:
            raise DataError(
                f"{meta_path}: vocab_size {meta['vocab_size']} is larger than the model's {vocab_size}"
            )
        if self.tokens < seq_len:
            raise DataError(f"{folder / TOKENS}: {self.tokens} tokens make no window of {seq_len}")
        self.path, self.seq_len = folder / TOKENS, seq_len
        self._map: np.memmap | None = None
        self._pid = -1

    def __len__(self) -> int:
        return self.tokens // self.seq_len

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self._map is None or self._pid != os.getpid():
            self._map, self._pid = (
                np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.tokens,)),
                os.getpid(),
            )
        window = torch.from_numpy(
            self._map[index * self.seq_len : (index + 1) * self.seq_len].astype(np.int64)
        )
        return {"input_ids": window, "labels": window.clone()}

    def __getstate__(self) -> dict:  # a spawned worker maps the file itself
        return {**self.__dict__, "_map": None, "_pid": -1}
