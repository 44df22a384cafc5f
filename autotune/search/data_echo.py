"""Which data a study trains on, said at its start and kept in ``run.json`` for the report.

A user who points a run at their own robot data (``--dataset DIR``) sees the folder, its views and
its state/action dims before the first trial, and a run on the workload's made dataset or on
synthetic batches says so: the numbers of a study are of the data it read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autotune.config import TrainConfig
from autotune.errors import AutotuneError, DataError


@dataclass(frozen=True)
class DataEcho:
    """The data of a configuration as plain data (``run.json``'s ``data``)."""

    source: str
    """``synthetic``, or the workload's data source (``lerobot`` for gr00t_n16)."""
    dataset: str | None = None
    """The dataset folder read (absolute), None for synthetic batches."""
    own: bool = False
    """The workload's own samples from its ``dataset()``, not a dataset folder."""
    made: bool = False
    """The folder is the dataset the workload made in its cache (``data.dataset`` null)."""
    version: str | None = None
    episodes: int | None = None
    views: list[str] = field(default_factory=list)
    state_dim: int | None = None
    action_dim: int | None = None

    def line(self) -> str:
        """``data: lerobot /data/mine (LeRobot v2.1, 40 episodes): 2 views (front, wrist), state 8 / action 7 dims``."""
        if self.own:
            return f"data: the workload's own {self.source!r} data (not a dataset folder)"
        if self.dataset is None:
            return f"data: {self.source} batches (no dataset read)"
        what = f"data: {self.source} {self.dataset}"
        if self.version is not None:
            what += f" (LeRobot {self.version}, {self.episodes} episodes)"
        if self.made:
            what += " [made by the workload: give --dataset DIR for your own]"
        if self.views or self.state_dim is not None:
            what += (
                f": {len(self.views)} views ({', '.join(self.views)}), "
                f"state {self.state_dim} / action {self.action_dim} dims"
            )
        return what

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def data_echo(cfg: TrainConfig, workload) -> DataEcho:
    """What ``cfg`` trains on, read from the dataset's ``meta/`` (not its data files); a DataError
    for a LeRobot folder of the user's that a trial would refuse before building its model."""
    sources = workload.data_sources()
    source = cfg.data.source or sources[0]
    if source == "synthetic":
        return DataEcho(source)
    folder = workload.data_folder(cfg.preset, cfg.data)
    if folder is None:  # the workload's own samples, not a folder autotune reads
        return DataEcho(source, own=True)
    folder = Path(folder).resolve()
    echo = DataEcho(source, str(folder), made=not cfg.data.dataset)
    # a LeRobot folder the user named is checked as a trial would check it before building the
    # model, so that a broken one is refused before the study is written; the workload's own made
    # dataset (made or remade by its first trial) and other workloads' folders are only described
    strict = source == "lerobot" and not echo.made
    if not strict and not (folder / "meta" / "info.json").is_file():
        return echo
    from autotune.data import load_meta

    try:
        if strict:
            workload.fit_data(cfg.preset, cfg.data)
        meta = load_meta(folder)
    except AutotuneError as exc:
        if not strict:
            return echo
        raise DataError(f"{exc}; `autotune data check {folder}` finds its first problem") from None
    return DataEcho(
        source,
        str(folder),
        made=echo.made,
        version=meta.version,
        episodes=len(meta.episodes),
        views=[v.name for v in meta.modality.views],
        state_dim=meta.state_dim,
        action_dim=meta.action_dim,
    )
