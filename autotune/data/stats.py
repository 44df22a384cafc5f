"""Normalisation statistics of a dataset's vector features: ``meta/stats.json``, or the per-episode
statistics aggregated where there is none (v2.1's ``meta/episodes_stats.jsonl``, v3.0's ``stats/``
columns of the episode index).

Aggregation is lerobot's: min of mins, max of maxes, the count-weighted mean, and the pooled
variance ``sum(count * (std**2 + (mean - total_mean)**2)) / total_count``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autotune.errors import DataError

STAT_NAMES = ("mean", "std", "min", "max")
Stats = dict[str, dict[str, np.ndarray]]
"""feature -> stat name -> float64 [dim]."""


def feature_stats(raw: object, key: str, dim: int, where: str) -> dict[str, np.ndarray]:
    """The four stats of ``key`` out of ``raw`` (a feature's dict of lists), each [dim] finite."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: no statistics of {key!r}")
    out = {}
    for name in STAT_NAMES:
        if name not in raw:
            raise DataError(f"{where}: missing key {key}.{name!r}")
        try:
            values = np.asarray(raw[name], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            values = np.zeros(0)
        if values.shape != (dim,) or not np.isfinite(values).all():
            raise DataError(f"{where}: {key}.{name} is not [{dim}] finite numbers")
        out[name] = values
    return out


def count_of(raw: dict, key: str, where: str) -> float:
    try:
        count = float(np.asarray(raw.get("count", []), dtype=np.float64).reshape(-1)[0])
    except (IndexError, TypeError, ValueError, AttributeError):
        count = float("nan")
    if not count > 0:
        raise DataError(
            f"{where}: {key}.count is missing or not > 0 (needed to aggregate episodes)"
        )
    return count


def aggregate(parts: list[tuple[dict[str, np.ndarray], float]]) -> dict[str, np.ndarray]:
    """One feature's stats over episodes: ``parts`` are (stats, frame count) per episode."""
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused by the caller
        return _pooled(parts)


def _pooled(parts: list[tuple[dict[str, np.ndarray], float]]) -> dict[str, np.ndarray]:
    counts = np.array([c for _, c in parts])[:, None]
    means = np.stack([s["mean"] for s, _ in parts])
    total = counts.sum()
    mean = (means * counts).sum(0) / total
    var = ((np.stack([s["std"] for s, _ in parts]) ** 2 + (means - mean) ** 2) * counts).sum(
        0
    ) / total
    return {
        "mean": mean,
        "std": np.sqrt(var),
        "min": np.stack([s["min"] for s, _ in parts]).min(0),
        "max": np.stack([s["max"] for s, _ in parts]).max(0),
    }


def from_stats_json(raw: object, dims: dict[str, int], path: Path) -> Stats:
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not a JSON object of features")
    return {key: feature_stats(raw.get(key), key, dim, str(path)) for key, dim in dims.items()}


def from_episodes(episodes: list[tuple[dict, str]], dims: dict[str, int]) -> Stats:
    """Aggregate per-episode stats: ``episodes`` are (feature -> raw stats, where) per episode."""
    out = {}
    for key, dim in dims.items():
        parts = []
        for raw, where in episodes:
            entry = raw.get(key) if isinstance(raw, dict) else None
            parts.append((feature_stats(entry, key, dim, where), count_of(entry, key, where)))
        out[key] = aggregate(parts)
        _check_finite(out[key], key, episodes[0][1].rsplit(":", 1)[0])
    return out


def _check_finite(stats: dict[str, np.ndarray], key: str, file: str) -> None:
    """Finite per episode, yet 1e308 times a count overflows: every normalised value would be NaN."""
    bad = next((name for name, v in stats.items() if not np.isfinite(v).all()), None)
    if bad:
        raise DataError(
            f"{file}: {key}.{bad} aggregated over the episodes is not finite (the episodes' stats "
            "or counts are too large); allowed: stats whose mean and variance a float64 holds"
        )
