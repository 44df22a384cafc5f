"""GR00T N1.7 on LeRobot data: N1.7's image geometry (the whole frame resized to 256 x 256, a
230/256 random crop, resized back, no colour jitter), horizon 40, state and action padded to 132
dims, and training steps on datasets laid out as lerobot writes them (v2.1 and v3.0, the files
lerobot writes only: no modality.json; see tests/data/test_formats.py)."""

from __future__ import annotations

import json

import pytest
import torch

from autotune.cli import main
from autotune.config import DataConfig
from autotune.data import MakeSpec, load_meta, make_dataset
from autotune.data.augment import AugmentSpec, augment
from autotune.workloads import get_workload
from autotune.workloads.gr00t_common.batch import BATCH_KEYS, synthetic_batch
from autotune.workloads.gr00t_common.shape import IMG_CONTEXT_ID
from autotune.workloads.gr00t_n17.data import Gr00tN17Dataset, read_spec
from autotune.workloads.gr00t_n17.fit import fit_preset
from autotune.workloads.gr00t_n17.presets import get_preset

FULL, TINY = get_preset("full"), get_preset("tiny")
DATASETS = {
    "v2.1-2views-av1": MakeSpec(3, views=2, size=48, width=64, frames=12, fps=10, format="v2.1", codec="av1", extras=False),
    "v3.0-1view-av1": MakeSpec(3, views=1, size=64, frames=12, fps=10, format="v3.0", codec="av1", extras=False),
}  # fmt: skip


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("n17-data")
    return {name: make_dataset(root / name, spec) for name, spec in DATASETS.items()}


def test_the_image_geometry_is_n17s():
    spec = read_spec(FULL)
    assert spec.image_shape == (256, 256) and spec.action_horizon == 40 and spec.state_dim == 132
    aug = spec.augment
    assert (aug.short_edge, aug.jitter, int(256 * aug.crop_fraction)) == (None, False, 230)
    # any frame, any aspect: 256 x 256 out, and without jitter a flat colour stays that colour
    frames = torch.full((2, 3, 480, 640), 77, dtype=torch.uint8)
    out = augment(frames, aug, torch.Generator().manual_seed(0))
    assert out.shape == (2, 3, 256, 256) and bool((out == 77).all())
    # N1.6's recipe (short edge, 0.95 crop, jitter) is unchanged by default
    n16 = AugmentSpec((252, 336))
    assert (n16.short_edge, n16.crop_fraction, n16.jitter) == (256, 0.95, True)


def test_the_preset_takes_the_datasets_views_and_keeps_its_image_and_text_room(datasets):
    meta = load_meta(datasets["v3.0-1view-av1"])
    fitted = fit_preset(FULL, meta)
    assert (fitted.views, fitted.image_shape, fitted.image_tokens_per_view) == (1, (256, 256), 64)
    assert (
        fitted.max_text_tokens == FULL.max_text_tokens
        and fitted.seq_len == FULL.max_text_tokens + 66
    )
    assert fit_preset(fitted, meta) == fitted


def test_a_sample_is_the_fitted_presets_batch(datasets):
    ds = Gr00tN17Dataset(datasets["v2.1-2views-av1"], TINY)
    sample = ds[5]
    ref = synthetic_batch(ds.preset, 1, "cpu", torch.Generator().manual_seed(0))
    assert tuple(sample) == BATCH_KEYS
    assert {k: (tuple(v.shape), v.dtype) for k, v in sample.items()} == {
        k: (tuple(v.shape[1:]), v.dtype) for k, v in ref.items()
    }
    assert sample["images"].shape == (2, 3, 64, 64)  # 48 x 64 frames, resized whole to the square
    assert int((sample["input_ids"] == IMG_CONTEXT_ID).sum()) == 2 * 4
    assert sample["state"].shape == (1, 132) and sample["action"].shape == (40, 132)
    assert (
        int(sample["embodiment_id"]) == 10
    )  # no embodiment in info.json: upstream's new_embodiment slot


def test_the_workload_feeds_the_fitted_preset(datasets):
    data = DataConfig(dataset=str(datasets["v3.0-1view-av1"]), num_workers=0)
    workload = get_workload("gr00t_n17")
    try:
        workload.fit_data("tiny", data)
        batch = next(iter(workload.make_loader("tiny", data, 2, seed=0)))
        assert batch["images"].shape == (2, 1, 3, 64, 64)
        assert batch["input_ids"].shape[1] == workload.resolve("tiny").seq_len
        model = workload.build_model("tiny", "cpu")
        assert torch.isfinite(workload.loss(model, batch))
    finally:
        workload.fit_data("tiny", DataConfig(source="synthetic"))
    assert workload.resolve("tiny") == TINY


@pytest.mark.parametrize("name", list(DATASETS))
def test_train_two_steps_under_n17s_preprocessing(datasets, name, tmp_path, capsys):
    root = datasets[name]
    config = tmp_path / "config.yaml"
    config.write_text(f"workload: gr00t_n17\npreset: tiny\nbatch_size: 2\ndevice: cpu\n"
                      f"data:\n  dataset: {root}\n  num_workers: 0\n")  # fmt: skip
    assert main(["train", "--config", str(config), "--steps", "2", "--warmup", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["measurement"]
    assert result["steps"] == 2 and all(torch.isfinite(torch.tensor(result["losses"])))


def test_data_make_writes_a_dataset_n17_reads(tmp_path, capsys):
    """``autotune data make``'s frames (any size: N1.7 resizes the whole frame) and vectors fit N1.7."""
    root = tmp_path / "made"
    argv = [
        "data",
        "make",
        str(root),
        "--episodes",
        "2",
        "--frames",
        "6",
        "--size",
        "64",
        "--views",
        "1",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(f"made {root}")
    sample = Gr00tN17Dataset(root, TINY)[3]
    assert sample["images"].shape == (1, 3, 64, 64) and sample["action"].shape == (40, 132)
