"""GR00T N1.6 on a user's own LeRobot data: the preset fitted to the dataset's views and frame
size, state and action padded to 128 dims, and two training steps on each layout.

The datasets are ``data make``'s, laid out as lerobot writes them (see tests/data/test_formats.py):
v2.1 and v3.0, with and without GR00T's modality.json, one and two views, AV1 (and HEVC).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from autotune.cli import main
from autotune.config import DataConfig
from autotune.data import MakeSpec, load_meta, make_dataset
from autotune.errors import DataError
from autotune.workloads import get_workload
from autotune.workloads.gr00t_common.batch import BATCH_KEYS, synthetic_batch
from autotune.workloads.gr00t_n16.data import Gr00tDataset
from autotune.workloads.gr00t_n16.fit import fit_preset, model_image_shape
from autotune.workloads.gr00t_n16.model import Gr00tN16Model
from autotune.workloads.gr00t_n16.presets import IMG_CONTEXT_ID, get_preset

FULL, TINY = get_preset("full"), get_preset("tiny")
DATASETS = {  # format, modality.json, views, codec, height x width
    "v2.1-modality-2views-av1": MakeSpec(3, views=2, size=64, frames=12, fps=10, format="v2.1", codec="av1"),
    "v2.1-inferred-1view-av1": MakeSpec(3, views=1, size=48, width=64, frames=12, fps=10, format="v2.1", codec="av1", extras=False),
    "v3.0-modality-1view-hevc": MakeSpec(3, views=1, size=64, frames=12, fps=10, format="v3.0", codec="hevc"),
    "v3.0-inferred-2views-av1": MakeSpec(3, views=2, size=48, width=64, frames=12, fps=10, format="v3.0", codec="av1", extras=False),
}  # fmt: skip


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("user-data")
    return {name: make_dataset(root / name, spec) for name, spec in DATASETS.items()}


@pytest.mark.parametrize(
    "preset, frame, shape, tokens",
    [(FULL, (256, 256), (252, 252), 81), (FULL, (480, 640), (252, 336), 108), (FULL, (640, 480), (336, 252), 108),
     (TINY, (64, 64), (56, 56), 4), (TINY, (48, 64), (56, 84), 6)],
)  # fmt: skip
def test_the_image_at_the_vision_tower_is_upstreams(preset, frame, shape, tokens):
    """Short edge 256 (64 for toys), long edge in proportion, both rounded to multiples of 28."""
    assert model_image_shape(preset, *frame) == shape
    h, w = shape
    assert (h // 28) * (w // 28) == tokens


def test_the_preset_takes_the_datasets_views_and_keeps_its_text_room(datasets):
    meta = load_meta(datasets["v2.1-inferred-1view-av1"])
    fitted = fit_preset(FULL, meta)
    assert (fitted.views, fitted.image_shape, fitted.image_tokens_per_view) == (1, (252, 336), 108)
    assert (
        fitted.max_text_tokens == FULL.max_text_tokens
        and fitted.seq_len == FULL.max_text_tokens + 110
    )
    assert (fitted.state_dim, fitted.action_dim, fitted.action_horizon) == (128, 128, 50)
    assert fit_preset(fitted, meta) == fitted  # fitting twice changes nothing
    assert (
        fit_preset(FULL, load_meta(datasets["v2.1-modality-2views-av1"])) == FULL
    )  # the preset's own shape


def test_a_sample_is_the_fitted_presets_batch(datasets):
    ds = Gr00tDataset(datasets["v3.0-inferred-2views-av1"], TINY)
    fitted = ds.preset
    sample = ds[5]
    ref = synthetic_batch(fitted, 1, "cpu", torch.Generator().manual_seed(0))
    assert tuple(sample) == BATCH_KEYS
    assert {k: (tuple(v.shape), v.dtype) for k, v in sample.items()} == {
        k: (tuple(v.shape[1:]), v.dtype) for k, v in ref.items()
    }
    assert sample["images"].shape == (2, 3, 56, 84)
    assert int((sample["input_ids"] == IMG_CONTEXT_ID).sum()) == 2 * 6
    assert sample["state"][0, 8:].eq(0).all() and not sample["action_mask"][:, 7:].any()
    assert (
        sample["action_mask"][:7, :7].all() and not sample["action_mask"][7:].any()
    )  # frame 5 of 12
    assert (
        int(sample["embodiment_id"]) == 10
    )  # no embodiment in info.json: upstream's new_embodiment slot
    batch = {k: v[None] for k, v in sample.items()}
    loss = Gr00tN16Model(fitted)(batch)
    assert torch.isfinite(loss)


def test_the_workload_builds_feeds_and_counts_the_fitted_preset(datasets):
    workload = get_workload("gr00t_n16")
    data = DataConfig(dataset=str(datasets["v2.1-inferred-1view-av1"]), num_workers=0)
    try:
        base_flops = workload.flops_per_sample("tiny")
        workload.fit_data("tiny", data)
        assert workload.resolve("tiny").image_shape == (56, 84)
        assert workload.synthetic_batch("tiny", 2, "cpu")["images"].shape == (2, 1, 3, 56, 84)
        assert workload.tokens_per_sample("tiny") == workload.resolve("tiny").seq_len
        assert workload.flops_per_sample("tiny") != base_flops
        batch = next(iter(workload.make_loader("tiny", data, 2, seed=0)))
        assert (
            batch["images"].shape == (2, 1, 3, 56, 84)
            and batch["input_ids"].shape[1] == workload.resolve("tiny").seq_len
        )
    finally:
        workload.fit_data("tiny", DataConfig(source="synthetic"))
    assert workload.resolve("tiny") == TINY


def test_what_cannot_be_mapped_is_one_line_naming_the_key(tmp_path):
    root = make_dataset(
        tmp_path / "gr1", MakeSpec(1, views=1, size=32, frames=4, embodiment="gr1", extras=False)
    )
    narrow = replace(TINY, state_dim=16)
    with pytest.raises(DataError, match=rf"{root}/meta/info\.json: state state \(observation\.state\[0:29\]\) has 29 dims; "
                                        r"preset tiny takes at most 16 \(padded to 16\)"):  # fmt: skip
        Gr00tDataset(root, narrow)


@pytest.mark.parametrize("name", list(DATASETS))
def test_check_then_train_two_steps(datasets, name, tmp_path, capsys):
    root = datasets[name]
    assert main(["data", "check", str(root)]) == 0
    checked = capsys.readouterr()
    assert checked.out.startswith(f"OK {root}: LeRobot {DATASETS[name].format}")
    assert ("modality.json: missing; inferred" in checked.err) == ("inferred" in name)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"preset: tiny\nbatch_size: 2\ndevice: cpu\ndata:\n  dataset: {root}\n  num_workers: 0\n"
    )
    assert main(["train", "--config", str(config), "--steps", "2", "--warmup", "0", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])["measurement"]  # the run's record
    assert result["steps"] == 2 and len(result["losses"]) == 2 + result["warmup_steps"]
    assert all(torch.isfinite(torch.tensor(result["losses"])))
