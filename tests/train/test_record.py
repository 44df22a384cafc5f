"""The trial record: its JSON round trip, and the worker that makes it once."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autotune.errors import ConfigError, DataError
from autotune.search.baseline import FIXES
from autotune.train.trial import worker
from autotune.train.trial.record import DDPBuckets, ProfileSummary, RankMemory, TrialRecord
from autotune.train.window.runner import TrainResult
from tests.records import measured, measurement


def test_a_measured_record_round_trips_through_json():
    m = measurement(
        12.5,
        window=30.0,
        bound=True,
        ddp=DDPBuckets(3, [100, 200, 50], 25 * 2**20, 3, False),
        config={"preset": "tiny", "ddp": {"bucket_cap_mb": 25.0}},
        tokens_per_s=400.0,
        wall_s=1.5,
    )
    m = replace(m, memory=replace(m.memory, per_rank=[RankMemory(5, 6), RankMemory(7, 8)]))
    record = TrialRecord(
        measurement=m,
        profile=ProfileSummary(
            profiled_step_ms=170.0,
            unprofiled_step_ms=160.0,
            overhead=0.0625,
            buckets={"compute_serial": 0.7, "other": 0.3},
            dominant="compute_serial",
            step_time_ms=165.0,
        ),
    )
    text = record.to_json()
    again = TrialRecord.from_json(text)
    assert again == record and again.to_json() == text
    assert again.measurement.memory.per_rank[1] == RankMemory(
        7, 8
    ) and again.measurement.ddp.bucket_sizes == [100, 200, 50]
    assert json.loads(text)["measurement"]["loader"] == {
        "window_samples_per_s": 30.0,
        "loader_samples_per_s": None,
        "bound": True,
    }


@pytest.mark.parametrize(
    "record",
    [
        TrialRecord.failed(
            "oom", "CUDA out of memory", traceback="Traceback ...\nOutOfMemoryError"
        ),
        TrialRecord.failed("pruned", "pruned after 3 measured steps", steps_run=3),
        TrialRecord(profile=ProfileSummary(overhead=0.01)),  # autotune profile: a profile alone
        TrialRecord(
            measurement=measurement(), profile=ProfileSummary(error="RuntimeError: no trace")
        ),
    ],
)
def test_failures_and_profiles_round_trip_too(record):
    again = TrialRecord.from_json(record.to_json())
    assert again == record and again.ok == (record.failure is None)


def test_a_failed_run_has_no_measurement():
    with pytest.raises(AssertionError):
        TrialRecord(measurement=measurement(), failure=TrialRecord.failed("oom", "x").failure)


def test_a_bad_or_newer_record_is_refused_by_name():
    data = measured().to_dict()
    data["measurement"]["step_time"]["median"] = 1.0
    with pytest.raises(
        ConfigError, match=r"trial #3: record\.measurement\.step_time\.median: unknown key"
    ):
        TrialRecord.from_dict(data, where="trial #3: record")
    with pytest.raises(
        ConfigError, match=r"record: version 99 is newer than this autotune reads \(1\)"
    ):
        TrialRecord.from_dict({**measured().to_dict(), "version": 99})
    del data["measurement"]["step_time"]
    with pytest.raises(ConfigError, match=r"^record: .*step_time"):
        TrialRecord.from_dict(data)


def test_the_runners_result_becomes_the_record():
    result = TrainResult(
        samples_per_s=20.0,
        tokens_per_s=640.0,
        step_time_ms=100.0,
        step_time_spread_ms={"p10": 95.0, "p90": 110.0, "min": 90.0, "max": 120.0, "mean": 101.0},
        peak_memory_bytes=5 * 2**30,
        peak_reserved_bytes=6 * 2**30,
        peak_memory_per_rank=[{"allocated": 5 * 2**30, "reserved": 6 * 2**30}],
        mfu=0.3,
        matmul_tflops=700.0,
        flops_per_sample=1e12,
        losses=[1.0, 0.9, 0.8],
        grad_norms=[3.0, 2.0, 1.0],
        world_size=1,
        batch_size=2,
        steps=2,
        warmup_steps=1,
        wall_s=0.3,
        device="cuda:0",
        environment={"torch": "2.11"},
        ddp=None,
        config={"preset": "tiny"},
        profile={
            "profiled_step_ms": 104.0,
            "unprofiled_step_ms": 100.0,
            "overhead": 0.04,
            "classification": {
                "buckets": {"compute_serial": 1.0},
                "dominant": "compute_serial",
                "step_time_ms": 103.0,
                "ranks": [],
            },
        },
        window_samples_per_s=25.0,
        loader_samples_per_s=20.0,
        loader_bound=True,
    )
    record = result.record()
    m = record.measurement
    assert (
        m.samples_per_s,
        m.step_time.median_ms,
        m.step_time.p90_ms,
        m.memory.reserved_bytes,
    ) == (20.0, 100.0, 110.0, 6 * 2**30)
    assert (m.loader.window_samples_per_s, m.loader.loader_samples_per_s, m.loader.bound) == (
        25.0,
        20.0,
        True,
    )
    assert m.losses == result.losses and m.config == {"preset": "tiny"} and m.device == "cuda:0"
    assert record.profile == ProfileSummary(
        profiled_step_ms=104.0,
        unprofiled_step_ms=100.0,
        overhead=0.04,
        buckets={"compute_serial": 1.0},
        dominant="compute_serial",
        step_time_ms=103.0,
    )
    assert TrialRecord.from_json(record.to_json()) == record


def test_the_worker_writes_a_failure_as_a_record(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: tiny\nddp: {bucket_cap_mb: -1}\n")
    out = tmp_path / "result.json"
    assert worker.main(["--config", str(bad), "--out", str(out)]) == 1
    record = TrialRecord.from_json(out.read_text())
    assert record.measurement is None and record.failure.reason == "config"
    assert (
        "ddp.bucket_cap_mb: -1" in record.failure.error and "Traceback" in record.failure.traceback
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (MemoryError(), ("oom", "MemoryError: the host's memory ran out")),
        (MemoryError("Unable to allocate 7.45 GiB"), ("oom", "MemoryError: Unable to allocate 7.45 GiB")),
        (ValueError("bad"), ("error", "ValueError: bad")),
    ],
    ids=["bare", "numpy", "other"],
)  # fmt: skip
def test_a_host_out_of_memory_is_an_oom_failure_that_says_so(exc, expected):
    """A bare MemoryError was reason 'error' with the text 'MemoryError: ' (verify printed
    'the stock configuration failed: MemoryError:')."""
    assert worker.classify_exception(exc) == expected


def test_a_dataset_that_cannot_be_read_is_a_data_failure_with_its_fix():
    """Its fix is in the dataset, not in the configuration the study would change."""
    error = DataError("/d/videos/ep1.mp4: frame 11 is past the end of the video (10 frames)")
    assert worker.classify_exception(error) == ("data", str(error))
    assert "autotune data check" in FIXES["data"]
