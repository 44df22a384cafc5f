"""The LeRobot data path any robot workload can use: datasets as the lerobot library writes them
(codebase v2.0, v2.1, v3.0; ``load_meta``), GR00T's ``meta/modality.json`` read or inferred,
decoded and augmented in DataLoader workers at the shapes a :class:`ReadSpec` asks for.

A workload builds its batch on :class:`LeRobotDataset` (GR00T N1.6:
``autotune.workloads.gr00t_n16.data``) and feeds it to ``build_host_loader``;
``DevicePrefetcher`` moves the batches to the GPU ahead of use; ``make_dataset`` /
``check_dataset`` back ``autotune data make`` / ``check`` (and cli.py ``data modality``).
"""

from autotune.data.check import DatasetSummary, check_dataset, render_summary
from autotune.data.dataset import LeRobotDataset
from autotune.data.loader import HostLoader, build_host_loader, dataset_root
from autotune.data.make import MakeSpec, make_dataset
from autotune.data.meta import DatasetMeta, load_meta
from autotune.data.prefetch import DevicePrefetcher
from autotune.data.sampler import ShardedInfiniteSampler
from autotune.data.spec import ReadSpec
from autotune.data.video import BACKENDS

__all__ = [
    "BACKENDS",
    "DatasetMeta",
    "DatasetSummary",
    "DevicePrefetcher",
    "HostLoader",
    "LeRobotDataset",
    "MakeSpec",
    "ReadSpec",
    "ShardedInfiniteSampler",
    "build_host_loader",
    "check_dataset",
    "dataset_root",
    "load_meta",
    "make_dataset",
    "render_summary",
]
