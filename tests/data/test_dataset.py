"""The Dataset: one sample's keys, shapes and values, and its errors on bad data."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from autotune.config import DataConfig
from autotune.data import LeRobotDataset, ReadSpec, build_host_loader
from autotune.data.episode import Normalizer
from autotune.data.modality import KeySlice
from autotune.errors import DataError
from autotune.workloads.gr00t_common.batch import BATCH_KEYS, synthetic_batch
from autotune.workloads.gr00t_n16.data import Gr00tDataset
from autotune.workloads.gr00t_n16.presets import (
    IMG_CONTEXT_ID,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    get_preset,
)

TINY, FULL = get_preset("tiny"), get_preset("full")
MP4 = "videos/chunk-000/observation.images.wrist/episode_000001.mp4"
PARQUET = "data/chunk-000/episode_000001.parquet"


def expected_shapes(preset):
    ref = synthetic_batch(preset, 1, "cpu", torch.Generator().manual_seed(0))
    return {k: (tuple(v.shape[1:]), v.dtype) for k, v in ref.items()}


@pytest.mark.parametrize("preset", [TINY, FULL], ids=["tiny", "full"])
def test_sample_has_the_batch_format(tiny_dataset, preset):
    sample = Gr00tDataset(tiny_dataset, preset)[7]
    assert tuple(sample) == BATCH_KEYS
    assert {k: (tuple(v.shape), v.dtype) for k, v in sample.items()} == expected_shapes(preset)


def test_sample_values(tiny_dataset):
    ds = Gr00tDataset(tiny_dataset, TINY)
    s = ds.sample(0, 10)
    ids, mask = s["input_ids"], s["attention_mask"]
    n = int(mask.sum())
    assert ids[n:].eq(PAD_ID).all() and ids[:n].ne(PAD_ID).all()
    assert int((ids == IMG_CONTEXT_ID).sum()) == TINY.views * TINY.image_tokens_per_view
    text = ids[: n - TINY.views * (TINY.image_tokens_per_view + 2)]
    assert len(text) >= 4 and text.ge(NUM_SPECIAL_TOKENS).all() and text.lt(TINY.vocab_size).all()
    assert s["state"][0, :8].abs().max() <= 5 and s["state"][0, 8:].eq(0).all()
    assert s["action_mask"][:, :7].all() and not s["action_mask"][:, 7:].any()
    assert int(s["embodiment_id"]) == 1


def test_action_chunk_past_the_end_is_padded_and_masked(tiny_dataset):
    s = Gr00tDataset(tiny_dataset, TINY).sample(2, 55)
    steps = s["action_mask"].any(dim=1)
    assert steps.tolist() == [True] * 5 + [False] * 45
    assert s["action"][5:].eq(0).all() and s["action"][:5, :7].abs().sum() > 0


def test_min_max_keys_are_in_minus_one_one(tiny_dataset):
    ds = Gr00tDataset(tiny_dataset, TINY)
    actions = torch.stack([ds.sample(e, t)["action"][0, :7] for e in range(3) for t in (0, 30, 59)])
    assert actions.abs().max() <= 1.0 and actions.abs().max() > 0.5


@pytest.mark.parametrize("normalization", ["min_max", "mean_std"])
def test_a_constant_column_normalises_to_zero(normalization):
    # upstream GR00T's normalize_values_minmax: a dim whose min == max is 0, not an edge of [-1, 1]
    stats = {"observation.state": {"min": np.array([0.5, 0.0]), "max": np.array([0.5, 2.0]),
                                   "mean": np.array([0.5, 1.0]), "std": np.array([0.0, 1.0])}}  # fmt: skip
    norm = Normalizer((KeySlice("s", 0, 2, normalization),), stats)
    assert norm(np.array([[0.5, 1.0]], np.float32)).tolist() == [[0.0, 0.0]]


def test_draw_seeds_the_augmentation(tiny_dataset):
    ds = Gr00tDataset(tiny_dataset, TINY, seed=1)
    assert torch.equal(ds[(3, 8)]["images"], ds[(3, 8)]["images"])
    assert not torch.equal(ds[(3, 8)]["images"], ds[(4, 8)]["images"])
    assert torch.equal(ds[(3, 8)]["state"], ds[(4, 8)]["state"])


def test_frame_past_the_end_of_an_episode(tiny_dataset):
    with pytest.raises(
        DataError,
        match=r"episode_000001\.parquet: frame 60 is past the end of episode 1 \(60 frames\)",
    ):
        Gr00tDataset(tiny_dataset, TINY).sample(1, 60)


def test_video_shorter_than_its_episode(broken_copy):
    episodes = broken_copy / "meta/episodes.jsonl"
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    rows[1]["length"] = 70
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pq.read_table(broken_copy / PARQUET)
    pq.write_table(pa_concat_rows(table, 70), broken_copy / PARQUET)
    with pytest.raises(
        DataError, match=r"episode_000001\.mp4: frame 65 is past the end of the video \(60 frames\)"
    ):
        Gr00tDataset(broken_copy, TINY).sample(1, 65)


def pa_concat_rows(table, n):
    out = pa.concat_tables([table, table]).slice(0, n)
    return out.set_column(3, "frame_index", pa.array(range(n), pa.int64()))


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_corrupt_mp4(broken_copy, damage):
    """The index is at the front (faststart, as lerobot writes): a cut file opens, and a frame in
    the part that is gone is named; an overwritten header does not open."""
    path = broken_copy / MP4
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\xff" * 64 + data[64:])
    ds = Gr00tDataset(broken_copy, TINY)
    problem = (
        "frame 55 not found: the stream ends before it"
        if damage == "truncate"
        else "cannot open the video"
    )
    with pytest.raises(
        DataError, match=rf"observation\.images\.wrist/episode_000001\.mp4: {problem}"
    ):
        ds.sample(1, 55)


def test_parquet_without_a_column(broken_copy):
    path = broken_copy / PARQUET
    pq.write_table(pq.read_table(path).drop_columns(["action"]), path)
    with pytest.raises(DataError, match=r"episode_000001\.parquet: missing column 'action'"):
        Gr00tDataset(broken_copy, TINY).sample(1, 0)


def test_state_rows_wider_than_declared(broken_copy):
    """The loader read the 8 declared values of each 100-wide row and trained on them."""
    path = broken_copy / PARQUET
    table = pq.read_table(path)
    wide = pa.array([[0.5] * 100] * table.num_rows)
    i = table.schema.get_field_index("observation.state")
    pq.write_table(table.set_column(i, "observation.state", wide), path)
    with pytest.raises(
        DataError,
        match=r"episode_000001\.parquet: column 'observation\.state' has 100 values per row; "
        r"meta/info\.json's features\.observation\.state\.shape says 8$",
    ):
        Gr00tDataset(broken_copy, TINY).sample(1, 0)


def test_missing_meta_file(broken_copy):
    (broken_copy / "meta/episodes_stats.jsonl").unlink()
    with pytest.raises(DataError, match=r"meta/episodes_stats\.jsonl: missing"):
        Gr00tDataset(broken_copy, TINY)


def test_embodiment_out_of_range(tiny_dataset):
    with pytest.raises(DataError, match=r"embodiment id 40 is not in \[0, 32\)"):
        Gr00tDataset(tiny_dataset, TINY, embodiment_id=40)


@pytest.mark.parametrize("backend", ["opencv", "torchcodec"])
def test_missing_backend_is_a_clear_error(tiny_dataset, backend):
    if importlib.util.find_spec({"opencv": "cv2", "torchcodec": "torchcodec"}[backend]):
        ds = Gr00tDataset(tiny_dataset, TINY, video_backend=backend)
        reference = Gr00tDataset(tiny_dataset, TINY)
        assert (
            torch.stack(ds.read_frames(0, 37)).int()
            - torch.stack(reference.read_frames(0, 37)).int()
        ).abs().float().mean() < 2
        return
    with pytest.raises(DataError, match=f"video backend '{backend}' is not installed"):
        Gr00tDataset(tiny_dataset, TINY, video_backend=backend)


def test_the_generic_reader_takes_another_workloads_shapes(tiny_dataset):
    """No GR00T in it: one view at 32 px, 8/7-wide vectors, a 4-step chunk, the task as an index."""
    spec = ReadSpec(views=1, image_size=32, state_dim=8, action_dim=7, action_horizon=4)
    ds = LeRobotDataset(tiny_dataset, spec)
    sample = ds.sample(2, 57)
    assert {k: (tuple(v.shape), v.dtype) for k, v in sample.items()} == {
        "images": ((1, 3, 32, 32), torch.uint8), "state": ((8,), torch.float32), "state_mask": ((8,), torch.bool),
        "action": ((4, 7), torch.float32), "action_mask": ((4, 7), torch.bool),
        "task_index": ((), torch.int64), "embodiment_id": ((), torch.int64),
    }  # fmt: skip
    assert sample["action_mask"].all(dim=1).tolist() == [True, True, True, False]  # 60 frames
    gr00t = Gr00tDataset(tiny_dataset, TINY).sample(2, 57)
    assert torch.equal(sample["state"], gr00t["state"][0, :8])
    data = DataConfig(dataset=str(tiny_dataset), num_workers=0)
    batch = next(iter(build_host_loader(ds, data, 3, seed=0)))
    assert batch["images"].shape == (3, 1, 3, 32, 32) and batch["task_index"].shape == (3,)


@pytest.mark.parametrize(
    "over, message",
    [({"views": 3}, r"2 video keys \(observation\.images\.front, observation\.images\.wrist\); the workload needs 3 views"),
     ({"state_dim": 4}, r"info\.json: state \(observation\.state\) has 8 dims; the workload takes at most 4"),
     ({"action_horizon": 0}, r"ReadSpec\.action_horizon is 0; allowed: an integer >= 1")],
)  # fmt: skip
def test_a_spec_the_dataset_cannot_fill_is_refused(tiny_dataset, over, message):
    with pytest.raises(DataError, match=message):
        LeRobotDataset(
            tiny_dataset,
            ReadSpec(
                **{
                    "views": 1,
                    "image_size": 32,
                    "state_dim": 8,
                    "action_dim": 7,
                    "action_horizon": 4,
                    **over,
                }
            ),
        )
