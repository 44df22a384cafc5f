"""The HTA cross-check and the classify command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.profiling import compare_with_hta, load_traces
from autotune.profiling.classify import ClassifyOptions
from autotune.profiling.hta_check import NOT_APPLICABLE

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("source", ["gpu_basic.json.gz", "gpu_graph.json.gz", "two_ranks"])
def test_hta_agrees_on_gpu_fixtures(source):
    traces = load_traces(DATA / source)
    check = compare_with_hta(traces)
    assert check.applicable, check.status
    assert [r.rank for r in check.ranks] == [t.rank for t in traces]
    # HTA rounds its overlap percentage to two decimals; everything else must match exactly.
    assert check.max_abs_diff_fraction() < 1e-4
    for r in check.ranks:
        assert r.ours_us["span"] > 0


def test_hta_agrees_on_known_values():
    [r] = compare_with_hta(load_traces(DATA / "gpu_graph.json.gz")).ranks
    # Kernels run [20, 140) per step, steps 1000 apart; NCCL [110, 140) is a third hidden.
    assert r.ours_us == {"span": 1120.0, "idle": 880.0, "compute": 200.0, "exposed_comm": 40.0}
    assert r.hta_us == pytest.approx(r.ours_us, abs=0.01)


def test_hta_not_applicable_without_gpu_events():
    check = compare_with_hta(load_traces(DATA / "cpu_only.json.gz"))
    assert not check.applicable
    assert check.status == NOT_APPLICABLE == "not applicable (no GPU events)"


def test_cli_text(capsys):
    assert main(["classify", str(DATA / "two_ranks")]) == 0
    out = capsys.readouterr().out
    assert "dominant: compute_serial" in out
    assert "straggler: rank 1" in out
    assert "comm_wait" in out and "sm90_xmma_gemm" in out


def test_cli_json_with_hta(capsys):
    assert main(["classify", str(DATA / "gpu_basic.json.gz"), "--json", "--hta"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {
        "buckets",
        "dominant",
        "step_time_ms",
        "steps",
        "ranks",
        "straggler",
        "top_kernels",
        "launch",
        "hta",
    }
    assert list(doc["buckets"]) == [
        "compute_serial",
        "comm_wait",
        "launch_overhead",
        "sync_wait",
        "data_stall",
        "other",
    ]
    assert doc["dominant"] == "launch_overhead"
    assert doc["step_time_ms"] == pytest.approx(0.1125)
    assert doc["ranks"][0]["steps"] == 2
    assert doc["hta"]["status"] == "ok"
    assert doc["top_kernels"][0]["share"] == pytest.approx(35 / 98)


def test_cli_hta_on_cpu_trace_reports_not_applicable(capsys):
    assert main(["classify", str(DATA / "cpu_only.json.gz"), "--hta"]) == 0
    assert "HTA cross-check: not applicable (no GPU events)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "1e300"])
@pytest.mark.parametrize("flag", ["--cpu-dispatch-us", "--launch-gap-max-us"])
def test_cli_rejects_a_threshold_out_of_range_naming_the_flag(capsys, flag, value):
    assert main(["classify", str(DATA / "cpu_only.json.gz"), flag, value]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {flag}: {value!r} is out of range; allowed: a number from 0 to 1e+09 "
        "(microseconds)\n"
    )


def test_thresholds_of_the_api_are_checked_too():
    with pytest.raises(ConfigError, match=r"classify\.launch_gap_max_us: inf is out of range"):
        ClassifyOptions(launch_gap_max_us=float("inf"))


# Device event names from the H200 traces of issue 5.
H200_NAMES = {
    "memcpy32_post": "COMPUTATION",  # a kernel of CUDA-graph memcpy nodes, not a copy
    "Memcpy HtoD (Pageable -> Device)": "MEMORY",
    "Memcpy DtoD (Device -> Device)": "MEMORY",
    "Memset (Device)": "MEMORY",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "COMMUNICATION",
    "nvjet_sm90_tst_144x128_64x6_1x2_h_bz_coopA_bias_TNN": "COMPUTATION",
    "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>": "COMPUTATION",
}


def test_device_kinds_agree_with_hta_kernel_types():
    from hta.utils.utils import get_kernel_type

    from autotune.profiling.kinds import DEVICE_TABLE, DeviceKind, kinds_of

    ours = dict(zip(H200_NAMES, kinds_of(DEVICE_TABLE, list(H200_NAMES))))
    as_hta = {
        DeviceKind.COMM: "COMMUNICATION",
        DeviceKind.MEMORY: "MEMORY",
        DeviceKind.COMPUTE: "COMPUTATION",
    }
    assert {n: as_hta[DeviceKind(k)] for n, k in ours.items()} == H200_NAMES
    assert {n: get_kernel_type(n) for n in H200_NAMES} == H200_NAMES
