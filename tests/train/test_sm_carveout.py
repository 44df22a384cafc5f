"""``optimizer.overlap_sm_carveout``: refused without the overlap it makes room for; the carve-out is
set only while the prefix is captured, and put back after (GPU: ``tests/train/test_gpu_knobs.py``)."""

from __future__ import annotations

import pytest
import torch

from autotune.config import config_from_dict
from autotune.config.compat import Machine, check_machine
from autotune.errors import ConfigError, IncompatibleConfigError
from autotune.train.graphs import sm_carveout_for

GPU = Machine(True, (9, 0), 1, 16)


def test_a_carveout_needs_the_overlap():
    cfg = config_from_dict({"optimizer": {"overlap_sm_carveout": 32}})
    with pytest.raises(
        IncompatibleConfigError,
        match=r"optimizer.overlap_sm_carveout: refused: .* needs optimizer.overlap: true",
    ) as info:
        check_machine(cfg, GPU)
    assert "\n" not in str(info.value)
    cfg = config_from_dict(
        {
            "graphs": {"mode": "step"},
            "optimizer": {"impl": "master", "overlap": True, "overlap_sm_carveout": 32},
        }
    )
    check_machine(cfg, GPU)
    with pytest.raises(ConfigError, match=r"optimizer.overlap_sm_carveout: -1"):
        config_from_dict({"optimizer": {"overlap_sm_carveout": -1}})


@pytest.mark.filterwarnings("ignore")
def test_the_carveout_holds_inside_and_is_put_back():
    before = torch._C._get_sm_carveout_experimental()
    with sm_carveout_for(24):
        assert torch._C._get_sm_carveout_experimental() == 24
    assert torch._C._get_sm_carveout_experimental() == before
    with sm_carveout_for(0):
        assert torch._C._get_sm_carveout_experimental() == before
