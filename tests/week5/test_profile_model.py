"""week5_integration.profile_model: kernel names to groups, the cost formulas, a tiny profile, the results files."""
import dataclasses
import gzip
import json

import pytest
import torch

from course import runtime
from course.bench import is_result
from week5_integration import data
from week5_integration import model as m
from week5_integration import profile_model_bench as pm_bench  # the runs that write results (the solution's)

pm = runtime.lesson("week5_integration.profile_model")
kernels = runtime.lesson("week5_integration.kernels")
tr = runtime.lesson("week5_integration.train")
TINY = m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)

# Real names: CUDA kernels seen in H100 traces (cuBLAS, cuDNN, torch's own), the course's Triton
# kernels, Inductor's generated kernels, and the aten ops a CPU profile records.
NAMES = {
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)": "gemm",
    "matmul_kernel": "gemm",
    "swiglu_gate_up_kernel": "gemm",
    "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, float, true>)": "attention",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0": "attention",
    "flash_attention_bwd_dkdv_kernel": "attention",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>": "loss",
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>": "loss",
    "cross_entropy_fwd_grad_kernel": "loss",
    "triton_red_fused__log_softmax_nll_loss_forward_4": "loss",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, true>": "norm",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float, true>": "norm",
    "rmsnorm_fwd_persistent_kernel": "norm",
    "partial_sum_kernel": "norm",
    "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_view_1": "norm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>>": "elementwise",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>": "elementwise",
    "triton_poi_fused_mul_silu_2": "elementwise",
    "rope_kernel": "elementwise",
    "swiglu_bwd_kernel": "elementwise",
    "Memcpy DtoD (Device -> Device)": "elementwise",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>": "optimizer",
    "void at::native::multi_tensor_apply_kernel<at::native::(anonymous namespace)::LpNormFunctor<float, 2>>": "optimizer",
    "void at::native::lpnorm_cleanup<float, 2, float>": "optimizer",
    "void at::native::(anonymous namespace)::embedding_backward_cuda_kernel<float, long>": "other",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor>>>": "other",
    "aten::mm": "gemm",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
    "aten::_log_softmax_backward_data": "loss",
    "aten::_fused_rms_norm": "norm",
    "aten::mul": "elementwise",
    "Optimizer.step#AdamW.step": "optimizer",
    "aten::embedding_dense_backward": "other",
}


@pytest.mark.parametrize("name,group", NAMES.items(), ids=[n[:40] for n in NAMES])
def test_classify_puts_real_kernel_names_in_their_group(name, group):
    assert pm.classify(name) == group


def test_every_group_has_a_pattern_shown_in_order():
    assert [g for g, _ in pm.GROUP_PATTERNS] == ["optimizer", "attention", "loss", "norm", "gemm", "elementwise"]
    assert set(pm.GROUPS) == {g for g, _ in pm.GROUP_PATTERNS} | {"other"}


def test_cost_formulas_by_hand():
    cfg, B, T = TINY, 3, 16
    N, d, h, L, V = B * T, cfg.d_model, cfg.hidden, cfg.n_layers, cfg.vocab_size
    with torch.device("meta"):
        P = m.count_parameters(m.GPT(cfg))
    costs = pm.group_costs(cfg, B, T, act_bytes=2)
    # GEMM FLOPs are the model's matmul FLOPs (flops_per_token without its attention term).
    assert costs["gemm"]["flops"] == m.flops_per_token(cfg, context=T) * N - 3 * 2 * L * T * d * N
    linears = [(d, 3 * d), (d, d), (d, 2 * h), (h, d)]
    per_layer = sum(3 * (N * (i + o) + i * o) * 2 for i, o in linears)
    assert costs["gemm"]["bytes"] == L * per_layer + 3 * (N * (d + V) + d * V) * 2
    assert costs["attention"] == {"flops": 7 * L * N * T * d, "bytes": 12 * L * N * d * 2}
    assert costs["norm"] == {"flops": (2 * L + 1) * 12 * N * d, "bytes": (2 * L + 1) * 20 * N * d}
    rope, swiglu, residual = 8 * N * d * 2, 8 * N * h * 2, 2 * (10 + 12) * N * d
    assert costs["elementwise"]["bytes"] == L * (rope + swiglu + residual)
    assert costs["loss"] == {"flops": 6 * N * V, "bytes": 3 * N * V * 2}
    assert costs["optimizer"] == {"flops": 15 * P, "bytes": 40 * P}
    fp32 = pm.group_costs(cfg, B, T, act_bytes=4)
    assert fp32["gemm"]["bytes"] == 2 * costs["gemm"]["bytes"] and fp32["gemm"]["flops"] == costs["gemm"]["flops"]
    gpt2 = pm.group_costs(m.config(cfg, mlp="gelu", pos="learned"), B, T)
    h2 = m.config(cfg, mlp="gelu").hidden
    assert gpt2["elementwise"]["bytes"] == L * (5 * N * h2 * 2 + residual)   # no RoPE, GELU instead of SwiGLU
    with pytest.raises(ValueError, match="act_bytes"):
        pm.group_costs(cfg, B, T, act_bytes=3)


def test_roofline_placement_arithmetic():
    profile = pm.Profile("x", {"nvjet_gemm": {"us": 2000.0, "calls": 4}, "rope_kernel": {"us": 500.0, "calls": 2}},
                         steps=2, source="test", trace=None, gpu_busy=None, wall_ms_per_step=0.0)
    costs = {"gemm": {"flops": 1e12, "bytes": 1e9}, "elementwise": {"flops": 1e6, "bytes": 3e8}}
    placed = pm.place_on_roofline(profile, costs, copy_gbps=3000.0, peak_tflops=700.0)
    gemm, ew = placed["gemm"], placed["elementwise"]
    assert gemm["ms"] == pytest.approx(1.0) and gemm["tflops"] == pytest.approx(1000.0)  # 1e12 FLOPs in 1 ms
    assert gemm["bound"] == "compute" and gemm["roof_tflops"] == 700.0                     # 1000 FLOP/B > ridge 233
    assert ew["gbps"] == pytest.approx(3e8 / 0.25e-3 / 1e9) and ew["bound"] == "memory"
    assert ew["roof_tflops"] == pytest.approx(3000.0 * (1e6 / 3e8) / 1e3)
    groups = profile.groups()
    assert groups["gemm"]["calls"] == 2 and groups["elementwise"]["share"] == pytest.approx(0.2)


def test_kernels_are_read_from_the_chrome_trace(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k1", "ts": 0, "dur": 5.0},
              {"ph": "X", "cat": "kernel", "name": "k1", "ts": 10, "dur": 7.0},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 20, "dur": 1.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 100.0}]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert pm.kernels_from_trace(path) == {"k1": {"us": 12.0, "calls": 2},
                                           "Memcpy DtoD (Device -> Device)": {"us": 1.0, "calls": 1}}


def small_setup():
    return tr.TrainConfig(steps=2, batch=2, seq_len=8, lr=1e-3, warmup=1, corpus_bytes=4000, skip=1, amp=False)


def test_a_profile_of_the_torch_twin_sees_every_group_and_writes_a_trace(tmp_path):
    trace = tmp_path / "trace.json.gz"
    profile = pm.profile_training(m.TORCH_OPS, TINY, small_setup(), steps=1, warmup=1, trace_path=trace)
    groups = profile.groups()
    for group in ("gemm", "attention", "loss", "optimizer", "elementwise"):
        assert groups[group]["us"] > 0, (group, profile.per_step()[:10])
    assert sum(g["share"] for g in groups.values()) == pytest.approx(1.0)
    assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]


def test_results_files_before_and_after_the_swaps(tmp_path):
    record = pm_bench.profile_run([m.TORCH_OPS, kernels.swap_plan(TINY)[1]], cfg=TINY, tc=small_setup(), out=tmp_path, steps=1)
    assert is_result(record) and record["benchmark"] == "profile_week5"
    saved = json.loads((tmp_path / "profile_week5.json").read_text())
    assert {r["size"] for r in saved["rows"]} == {"torch ops", "+norm ops"}
    assert {r["variant"] for r in saved["rows"]} == set(pm.GROUPS)
    text = (tmp_path / "profile_week5.md").read_text()
    assert "Groups by name" in text and "optimizer: `adam" in text
    assert (tmp_path / "profile_week5.png").stat().st_size > 0
    assert (tmp_path / "trace_week5_torch.json.gz").exists()


def test_swaps_table_times_each_variant_from_the_same_start(tmp_path):
    plan = kernels.swap_plan(TINY)
    variants = [(plan[0], None), (plan[1], None), (dataclasses.replace(m.TORCH_OPS, name="broken", norm=None), None)]
    record = pm_bench.swaps_run(cfg=TINY, tc=small_setup(), out=tmp_path, variants=variants)
    rows = {r["variant"]: r for r in record["rows"]}
    assert "skipped" not in rows["+norm"], rows["+norm"]["skipped"]  # a failing variant is recorded, not raised
    assert rows["torch"]["speedup_vs_torch"] == 1.0 and rows["+norm"]["ms"] > 0
    assert rows["+norm"]["loss_max_rel_diff"] < 1e-4          # float32: same losses up to rounding
    assert rows["broken"]["skipped"].startswith("failed: TypeError")  # recorded, not raised
    assert "+norm" in (tmp_path / "swaps_week5.md").read_text()


def test_swap_variants_include_the_compiled_torch_twin():
    names = [ops.name for ops, _ in pm_bench.swap_variants(TINY)]
    assert names[0] == "torch" and "torch.compile" in names and "course" in names


@pytest.mark.gpu(reason="kernel names and times come from a CUDA trace")
def test_gpu_profile_of_gpt_small_is_classified(tmp_path):
    cfg, tc = pm_bench.default_setup()
    record = pm_bench.profile_run(cfg=cfg, tc=dataclasses.replace(tc, batch=8), out=tmp_path, steps=2)
    for ops in ("torch", "course"):
        rows = {r["variant"]: r for r in record["rows"] if r["size"] == f"{ops} ops"}
        assert rows["gemm"]["share"] > 0.2 and rows["attention"]["ms"] > 0 and rows["optimizer"]["ms"] > 0
        # the patterns must name nearly everything a real step launches
        assert rows["other"]["share"] < 0.1, record["profiles"][ops]["kernels"][:10]
        assert not record["profiles"][ops]["fallbacks"]


def test_swap_rows_say_whether_the_host_paced_their_steps(tmp_path, monkeypatch, gpu_clock):
    """Each swap row takes its ms and flag from train's Timing (bench.timing_fields); the table marks it. The GPU
    path on the CPU with stand-in events (conftest's gpu_clock), which follow the host."""
    from week5_integration import train as solution

    monkeypatch.setattr(solution, "LoopClock", gpu_clock())
    record = pm_bench.swaps_run(cfg=TINY, tc=small_setup(), variants=[(m.TORCH_OPS, None)])
    row = record["rows"][0]
    assert row["host_bound"] is True and row["host_ms"] > 0
    table = pm_bench.swaps_markdown(record)
    assert f"| {row['ms']:.3f}* |" in table and "host-bound" in table
    del row["host_bound"]  # a record made before the flag renders as it did
    assert "* |" not in pm_bench.swaps_markdown(record)
