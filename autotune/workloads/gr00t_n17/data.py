"""The data path of GR00T N1.7: the GR00T data path (``gr00t_common.data``) with N1.7's fit of a
preset to a dataset (``fit.py``), its image geometry and its projector slots."""

from __future__ import annotations

from autotune.config import DataConfig
from autotune.data import HostLoader, ReadSpec
from autotune.data.augment import AugmentSpec
from autotune.workloads.gr00t_common import data as common
from autotune.workloads.gr00t_n17.fit import fit_preset
from autotune.workloads.gr00t_n17.presets import Gr00tN17Preset

# Upstream N1.7's projector slot of each embodiment tag (EMBODIMENT_TAG_TO_PROJECTOR_INDEX in
# gr00t/model/gr00t_n1d7/processing_gr00t_n1d7.py); a dataset that names no id takes its tag's.
PROJECTOR_INDEX = {"oxe_droid_relative_eef_relative_joint": 24, "xdof_relative_eef_relative_joint": 27,
                   "xdof_relative_eef_relative_joint_subtask": 27, "real_g1_relative_eef_relative_joints": 25,
                   "real_r1_pro_sharpa_relative_eef": 26, "unitree_g1_full_body_with_waist_height_nav_cmd": 25,
                   "unitree_g1_sonic": 11, "simpler_env_google": 0, "simpler_env_widowx": 1, "libero_sim": 2,
                   "new_embodiment": 10}  # fmt: skip


def read_spec(preset: Gr00tN17Preset) -> ReadSpec:
    """N1.7's frames (upstream's albumentations recipe, its default): the whole frame resized to the
    preset's square, a random crop of ``crop_size`` of each side's ``image_size``, resized back; no
    colour jitter (``color_jitter_params`` is None)."""
    shape = preset.image_shape
    augment = AugmentSpec(shape, short_edge=None, crop_fraction=preset.crop_size / preset.image_size,
                          jitter=False)  # fmt: skip
    return common.read_spec(preset, image_size=preset.image_size, augment=augment)


class Gr00tN17Dataset(common.Gr00tDataset):
    """A LeRobot dataset read for GR00T N1.7 (see ``gr00t_common.data.Gr00tDataset``)."""

    projector_index = PROJECTOR_INDEX
    fit = staticmethod(fit_preset)
    spec_for = staticmethod(read_spec)


def build_loader(
    preset: Gr00tN17Preset, data_cfg: DataConfig, batch_size: int, **where
) -> HostLoader:
    """Endless host batches of ``preset``'s shapes (``gr00t_common.data.build_loader``)."""
    return common.build_loader(Gr00tN17Dataset, preset, data_cfg, batch_size, **where)
