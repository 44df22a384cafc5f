"""The trace diff: kinds of kernels by name, per-step figures of a real H200 trace, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.benchmarks.kernel_kinds import KERNEL_TABLE, KernelKind, kernel_kind, matching_row
from autotune.benchmarks.step_kernels import trace_kernels
from autotune.benchmarks.trace_diff import idle_rows, kind_rows, main
from autotune.errors import TraceFormatError
from autotune.profiling import classify
from autotune.profiling.synth import TraceBuilder

ROOT = Path(__file__).parents[2]
H200 = ROOT / "reports/examples/full-1gpu-h200/profiles/trial-0001/rank0.pt.trace.json.gz"
CPU_ONLY = ROOT / "tests/profiling/data/cpu_only.json.gz"
K = KernelKind

# (kernel name as a trace spells it, the row that decides it, its kind): every row at least once.
RULES = [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl", K.COMM),
    ("Memcpy HtoD (Pinned -> Device)", "copy", K.MEMCPY),
    ("memcpy32_post", "copy", K.MEMCPY),
    ("Memset (Unknown)", "set", K.MEMSET),
    ("_adamw_kernel", "optimizer", K.UPDATE),
    ("_sumsq_kernel", "optimizer", K.UPDATE),
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
        "<float, 4, (at::native::ADAM_MODE)1, false>, bool*, float*>",
        "optimizer",
        K.UPDATE,
    ),
    ("triton_for_fused_0", "optimizer", K.UPDATE),
    ("triton_tem_fused_flex_attention_0", "inductor attention template", K.ATTENTION),
    ("triton_tem_fused_addmm_gelu_3", "inductor matmul template", K.GEMM),
    ("triton_red_fused__to_copy_add_native_layer_norm_view_7", "inductor reduction", K.REDUCTION),
    ("triton_per_fused_sum_16", "inductor reduction", K.REDUCTION),
    # Inductor names the attention it fuses around: still a pointwise kernel.
    (
        "triton_poi_fused__fused_rms_norm__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_15",
        "inductor pointwise",
        K.POINTWISE,
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
        "attention",
        K.ATTENTION,
    ),
    (
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)",
        "attention",
        K.ATTENTION,
    ),
    # Flash attention names CUTLASS types; it is attention, not a GEMM.
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t>, false, true>(pytorch_flash::Flash_fwd_params)",
        "attention",
        K.ATTENTION,
    ),
    ("nvjet_sm90_tst_144x128_64x6_1x2_h_bz_coopA_bias_TNN", "gemm", K.GEMM),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align2>"
        "(cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align2::Params)",
        "gemm",
        K.GEMM,
    ),
    # cuBLASLt's split-K reduction belongs to its GEMM.
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>"
        "(cublasLt::cublasSplitKParams<float>)",
        "gemm",
        K.GEMM,
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
        "func_wrapper_t<float, at::native::sum_functor<float, float, float>>>>",
        "reduction",
        K.REDUCTION,
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
        "(int, float, c10::BFloat16 const*)",
        "reduction",
        K.REDUCTION,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>)",
        "elementwise",
        K.POINTWISE,
    ),
    # Random normal numbers are pointwise, not a norm.
    (
        "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
        "at::native::templates::cuda::normal_and_transform<float, float>>",
        "elementwise",
        K.POINTWISE,
    ),
    ("_rope_rotate_kernel", "OTHER", K.OTHER),
]


@pytest.mark.parametrize(("name", "row", "kind"), RULES, ids=[f"{r}:{n[:40]}" for n, r, _ in RULES])
def test_each_rule_decides_its_kernels(name, row, kind):
    assert matching_row(name) == row
    assert kernel_kind(name) == kind


def test_every_rule_has_a_case():
    assert {row.name for row in KERNEL_TABLE} == {row for _, row, _ in RULES}


@pytest.fixture(scope="module")
def h200():
    return trace_kernels(H200)


def test_h200_kinds_sum_to_the_busy_time_of_each_step(h200):
    """One stream ran every kernel of the tuned step: nothing is counted twice."""
    assert [s.step for s in h200.steps] == [3, 4, 5]
    for s in h200.steps:
        assert sum(s.kind_ns) == s.busy_ns
        assert s.concurrent_ns == 0
        assert sum(s.idle_before_ns) == sum(s.idle_after_ns) == s.idle_ns > 0
        assert s.busy_ns < s.span_ns


def test_h200_gemm_is_the_largest_kind_and_every_kernel_has_a_kind(h200):
    for s in h200.steps:
        assert max(KernelKind, key=lambda k: s.kind_ns[k]) == K.GEMM
        for k in (K.GEMM, K.ATTENTION, K.UPDATE, K.REDUCTION, K.POINTWISE, K.MEMSET, K.MEMCPY):
            assert s.kind_count[k] > 0 and s.kind_ns[k] > 0, k
        assert s.kind_count[K.OTHER] == s.kind_count[K.COMM] == 0
        # The master-weight update: two _sumsq_kernel and two _adamw_kernel launches.
        assert s.kind_count[K.UPDATE] == 4


def test_h200_kernel_counts_match_the_classifier(h200):
    steps = classify(H200).ranks[0].steps
    assert [sum(s.kind_count) for s in h200.steps] == [s.kernels for s in steps]


def test_a_trace_against_itself_differs_by_nothing(h200, capsys):
    for row in kind_rows(h200, h200):
        assert row.delta_ms == 0 and row.delta_n in (0, None), row
    assert all(a.delta_ms == b.delta_ms == 0 for a, b in idle_rows(h200, h200))
    assert main([str(H200), str(H200.parent), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| GEMM | 34.696 | 34.696 | +0.000 | 1068 | 1068 | +0 |" in out
    assert main([str(H200), str(H200), "--json"]) == 0
    kinds = json.loads(capsys.readouterr().out)["kinds"]
    assert kinds[0]["label"] == "GEMM" and kinds[0]["delta_ms"] == 0


def _two_streams(path: Path, steps: int) -> Path:
    """Per step (us from its start): GEMM [10, 50) and NCCL [30, 45) on two streams, a memset
    [60, 61), a GEMM [63, 80)."""
    b = TraceBuilder()
    for n in range(steps):
        t = 1000 * n
        b.step(n + 1, t, 100)
        b.op("aten::mm", t + 1, 5)
        b.launch("nvjet_sm90_tst_64x8_64x16_4x2_h_bz_NNT", t + 2, 1, t + 10, 40)
        b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 3, 1, t + 30, 15, stream=13)
        b.launch("Memset (Unknown)", t + 4, 1, t + 60, 1, api="cudaMemsetAsync", cat="gpu_memset")
        b.launch("nvjet_sm90_tst_64x8_64x16_4x2_h_bz_NNT", t + 5, 1, t + 63, 17)
    return b.write(path)


def test_concurrent_streams_and_the_gaps_next_to_each_kind(tmp_path):
    for s in trace_kernels(_two_streams(tmp_path / "t.json.gz", 2)).steps:
        assert (s.kind_ns[K.GEMM], s.kind_ns[K.COMM], s.kind_ns[K.MEMSET]) == (
            57_000,
            15_000,
            1_000,
        )
        assert (s.busy_ns, s.concurrent_ns, s.span_ns, s.idle_ns) == (
            58_000,
            15_000,
            70_000,
            12_000,
        )
        # [50, 60) follows the first GEMM (the NCCL kernel began later but ended first) and
        # waits for the memset; [61, 63) follows the memset and waits for the second GEMM.
        assert s.idle_before_ns[K.MEMSET] == 10_000 and s.idle_before_ns[K.GEMM] == 2_000
        assert s.idle_after_ns[K.GEMM] == 10_000 and s.idle_after_ns[K.MEMSET] == 2_000
        # the all-reduce ran wholly beside the first GEMM, and the GEMM beside it for as long
        assert s.beside_ns[K.COMM] == s.beside_ns[K.GEMM] == 15_000
        assert s.beside_ns[K.MEMSET] == 0
    trace = trace_kernels(tmp_path / "t.json.gz")
    beside = {r.label: r.after_ms for r in kind_rows(trace, trace) if "beside" in r.label}
    assert beside == {"GEMM beside other kinds": 0.015, "communication beside other kinds": 0.015}


def _refused(capsys, argv: list[str], match: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("trace_diff: error: ") and match in err, err


def test_a_trace_of_one_step_is_refused_in_one_line(tmp_path, capsys):
    one = _two_streams(tmp_path / "one.json.gz", 1)
    _refused(
        capsys, [str(H200), str(one)], f"{one}: one profiled step (ProfilerStep#1) ran kernels"
    )
    with pytest.raises(TraceFormatError, match="one profiled step"):
        main([str(one), str(H200), "--debug"])


def test_a_cpu_trace_and_a_non_trace_are_refused_in_one_line(tmp_path, capsys):
    _refused(capsys, [str(CPU_ONLY), str(H200)], f"{CPU_ONLY}: no kernels (a CPU-only trace)")
    text = tmp_path / "notes.json"
    text.write_text("hello")
    _refused(capsys, [str(H200), str(text)], f"{text}: not a complete JSON trace")
    _refused(capsys, [str(H200), str(tmp_path / "gone.json")], "gone.json: no such file")
