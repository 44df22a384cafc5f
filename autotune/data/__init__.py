"""The real data path of GR00T N1.6: LeRobot v2 datasets, decoded and augmented in workers.

``build_loader`` is what the workload calls; ``DevicePrefetcher`` moves its batches to the GPU
ahead of use; ``make_dataset`` / ``check_dataset`` back ``autotune data make`` / ``check``.
"""

from autotune.data.check import DatasetSummary, check_dataset, render_summary
from autotune.data.dataset import LeRobotDataset
from autotune.data.loader import HostLoader, build_loader
from autotune.data.make import MakeSpec, make_dataset
from autotune.data.meta import DatasetMeta, load_meta
from autotune.data.prefetch import DevicePrefetcher
from autotune.data.sampler import ShardedInfiniteSampler
from autotune.data.video import BACKENDS

__all__ = [
    "BACKENDS",
    "DatasetMeta",
    "DatasetSummary",
    "DevicePrefetcher",
    "HostLoader",
    "LeRobotDataset",
    "MakeSpec",
    "ShardedInfiniteSampler",
    "build_loader",
    "check_dataset",
    "load_meta",
    "make_dataset",
    "render_summary",
]
