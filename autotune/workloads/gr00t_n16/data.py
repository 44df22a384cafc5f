"""The data path of GR00T N1.6: the GR00T data path (``gr00t_common.data``) with N1.6's fit of a
preset to a dataset (``fit.py``), its image geometry and its projector slots."""

from __future__ import annotations

from autotune.config import DataConfig
from autotune.data import HostLoader, ReadSpec
from autotune.workloads.gr00t_common import data as common
from autotune.workloads.gr00t_n16.fit import fit_preset
from autotune.workloads.gr00t_n16.presets import Gr00tPreset

# Upstream N1.6's projector slot of each embodiment tag (EMBODIMENT_TAG_TO_PROJECTOR_INDEX in
# gr00t/model/gr00t_n1d6/processing_gr00t_n1d6.py); a dataset that names no id takes its tag's.
PROJECTOR_INDEX = {"robocasa_panda_omron": 13, "gr1": 20, "behavior_r1_pro": 24, "unitree_g1": 8,
                   "libero_panda": 2, "oxe_google": 0, "oxe_widowx": 1, "oxe_droid": 16, "new_embodiment": 10}  # fmt: skip


def read_spec(preset: Gr00tPreset) -> ReadSpec:
    """N1.6's frames: short edge 256, a 0.95 crop, resized to the preset's (fitted) image shape."""
    h, w = preset.image_shape
    return common.read_spec(preset, image_size=h, image_width=None if w == h else w)


class Gr00tDataset(common.Gr00tDataset):
    """A LeRobot dataset read for GR00T N1.6 (see ``gr00t_common.data.Gr00tDataset``)."""

    projector_index = PROJECTOR_INDEX
    fit = staticmethod(fit_preset)
    spec_for = staticmethod(read_spec)


def build_loader(preset: Gr00tPreset, data_cfg: DataConfig, batch_size: int, **where) -> HostLoader:
    """Endless host batches of ``preset``'s shapes (``gr00t_common.data.build_loader``)."""
    return common.build_loader(Gr00tDataset, preset, data_cfg, batch_size, **where)
