"""The data knobs: which data a run reads (settings of the run) and how it is loaded (the
loader's knobs). Applied by :mod:`autotune.data`."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.config._strict import check
from autotune.config.knob import Carried, Needs, NotCarried, Search, knob, validate

_OWN_DATA = NotCarried("the Trainer reads the dataset you give it", same_as=None)
_WORKERS = {"data.num_workers": "busy"}  # the auto space resolves "busy": every count but 0


def _if_workers(value, cfg):
    return value if cfg.data.num_workers else None


@dataclass
class DataConfig:
    """The data path and its loader knobs. Applied by ``autotune.data``.

    ``source`` and the fields below it name the workload's own data; which of them a workload
    reads is its ``data_fields`` (``autotune.config.compat.check_data`` refuses the others, so a
    workload's ``best.yaml`` carries only what applies to it). The loader knobs from
    ``num_workers`` on apply to every workload whose data autotune loads.
    """

    source: str | None = knob(
        None, group=None, nullable=True, allowed="a data source", hf=_OWN_DATA
    )
    """The workload's data source (``autotune inspect --list`` shows each workload's): e.g.
    ``lerobot`` for gr00t_n16, or ``synthetic`` (random tensors, no I/O); null: the workload's first."""
    dataset: str | None = knob(
        None, group=None, nullable=True, omit_none=True, allowed="a folder", hf=_OWN_DATA
    )
    """Dataset folder; null makes (once) and uses a dataset in the cache folder."""
    episodes: int | None = knob(
        None,
        group=None,
        low=1,
        high=1_000_000,  # what ``autotune data make`` makes (autotune.data.make.MAX_EPISODES)
        integer=True,
        nullable=True,
        omit_none=True,
        hf=_OWN_DATA,
    )
    """LeRobot sources: episodes of the dataset made when ``dataset`` is null (null: 8; at most
    1000000)."""
    video_backend: str | None = knob(
        None,
        group=None,
        choices=(None, "pyav", "opencv", "torchcodec"),
        allowed="null or one of ['pyav', 'opencv', 'torchcodec']",
        omit_none=True,
        hf=_OWN_DATA,
    )
    """LeRobot sources: mp4 decoder in the workers, ``pyav``, ``opencv`` or ``torchcodec`` (null: pyav)."""
    num_workers: int = knob(
        2,
        group="data",
        low=0,
        high=256,
        integer=True,
        search=Search(
            "int", low=0, high="cores", remedy="cores", doc="DataLoader worker processes"
        ),
        hf=Carried("dataloader_num_workers"),
    )
    """DataLoader worker processes (0 loads in the main process)."""
    prefetch_factor: int | None = knob(
        None,
        group="data",
        low=1,
        high=64,  # a run warms up through workers x this many batches before it measures
        integer=True,
        nullable=True,
        search=Search("categorical", choices=(None, 2, 4), when=_WORKERS, remedy=4),
        hf=Carried("dataloader_prefetch_factor", to=_if_workers),
    )
    """Batches each worker loads ahead (``null``: torch's default, 2 with workers; at most 64)."""
    pin_memory: bool = knob(
        True,
        group="data",
        search=Search("bool", remedy=True, needs="cuda"),
        hf=Carried("dataloader_pin_memory", needs_cuda=True),
    )
    """Page-lock host batches so host-to-device copies can be asynchronous."""
    persistent_workers: bool = knob(
        True,
        group="data",
        search=Search("bool", when=_WORKERS, remedy=True),
        hf=Carried("dataloader_persistent_workers", to=_if_workers),
    )
    """Keep workers alive between epochs."""
    multiprocessing_context: str = knob(
        "fork",
        group="data",
        choices=("fork", "spawn", "forkserver"),
        hf=NotCarried("the Trainer's DataLoader uses the platform's start method"),
    )
    """Worker start method: ``fork``, ``spawn`` or ``forkserver``."""
    device_prefetch: int = knob(
        0,
        group="data",
        low=0,
        high=16,
        integer=True,
        needs=(
            Needs(
                "cuda", "the device prefetcher copies on a CUDA stream; set it to 0 on CPU", (0,)
            ),
        ),
        search=Search("int", low=0, high=4, remedy=2),
        hf=NotCarried(
            "the Trainer has no device prefetcher (host-to-device copies on a side stream)"
        ),
    )
    """Depth of the device prefetcher: batches copied host-to-device ahead on a side stream (0: off)."""

    def __post_init__(self) -> None:
        validate(self)
        if self.prefetch_factor is not None:
            check(
                self.num_workers > 0,
                "prefetch_factor",
                self.prefetch_factor,
                "null when num_workers is 0",
                "is set",
            )
