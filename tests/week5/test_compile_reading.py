"""week5_integration.compile_reading: reading Inductor's output code and naming the course kernel each part replaces."""
import pytest

from course import runtime
from week5_integration import data
from week5_integration import model as m

cr = runtime.lesson("week5_integration.compile_reading")
tr = runtime.lesson("week5_integration.train")
TINY = m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)

# Kernel names as Inductor writes them (GPU: triton_<poi|red|per>_fused_<ops>_<n>; CPU: cpp_fused_...),
# with the graph they are in and how many tensors they read (their in_ptr / in_out_ptr parameters).
JOBS = {
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_view_3", "forward", 4): ("RMSNorm", "residual add"),
    ("triton_per_fused_add_mean_mul_pow_rsqrt_2", "forward", 3): ("RMSNorm", None),  # the add is "+ eps"
    ("triton_per_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0", "forward", 4): ("RMSNorm", "embedding gather"),
    ("triton_red_fused_native_layer_norm_7", "forward", 3): ("LayerNorm", None),
    ("triton_poi_fused_add_cat_clone_mul_neg_split_transpose_view_1", "forward", 5): ("RoPE", "layout copy"),
    ("triton_poi_fused_mul_silu_2", "forward", 2): ("SwiGLU", None),
    ("cpp_fused__unsafe_view_clone_mul_silu_split_4", "forward", 1): ("SwiGLU", "layout copy"),
    ("triton_poi_fused_gelu_gelu_backward_mul_9", "backward", 2): ("GELU", None),
    ("triton_red_fused__log_softmax_nll_loss_forward_5", "forward", 4): ("cross-entropy", None),
    ("triton_per_fused_add_div_mul_pow_sum_view_4", "backward", 5): ("RMSNorm backward", "residual-gradient add"),
    ("triton_per_fused_add_div_mul_pow_sum_view_1", "backward", 4): ("RMSNorm backward", None),
    ("triton_poi_fused_clone_transpose_2", "forward", 1): ("layout copy", None),
    ("triton_poi_fused_fill_11", "backward", 0): (None, None),
    # torch 2.11 on CUDA: F.rms_norm is aten._fused_rms_norm, and the kernel names say so.
    ("triton_per_fused__fused_rms_norm__to_copy__unsafe_view_add_10", "forward", 5): ("RMSNorm", "residual add"),
    ("triton_per_fused__fused_rms_norm__to_copy__unsafe_view_add_6", "forward", 3): ("RMSNorm", None),
    ("triton_per_fused__fused_rms_norm__to_copy_embedding_0", "forward", 3): ("RMSNorm", "embedding gather"),
    ("triton_per_fused__fused_rms_norm_backward__to_copy_add_view_6", "backward", 5):
        ("RMSNorm backward", "residual-gradient add"),
    ("triton_per_fused__fused_rms_norm_backward__to_copy_view_1", "backward", 4): ("RMSNorm backward", None),
}


@pytest.mark.parametrize("name,graph,reads", JOBS, ids=[n for n, _, _ in JOBS])
def test_a_kernel_name_says_which_course_kernel_does_its_job(name, graph, reads):
    job, cross = JOBS[(name, graph, reads)]
    kernel = cr.describe_kernel(name, graph, 1, reads)
    assert kernel.job == job
    assert (kernel.counterpart is not None) == (job not in (None, "layout copy", "embedding"))
    assert (kernel.cross_op is None) if cross is None else (cross in kernel.cross_op)


def test_fused_op_names_are_split_back_into_aten_ops():
    assert cr.fused_part("triton_red_fused__log_softmax_nll_loss_forward_5") == "_log_softmax_nll_loss_forward"
    assert cr.ops_of("_log_softmax_nll_loss_forward") == ["_log_softmax", "nll_loss_forward"]
    assert cr.ops_of("_to_copy_add_mean_mul_pow_rsqrt") == ["_to_copy", "add", "mean", "mul", "pow", "rsqrt"]
    assert cr.has_op("add_mean_mul", "mean") and not cr.has_op("add_meanx_mul", "mean")


OUTPUT = '''# AOT ID: ['0_forward']
import torch
triton_per_fused_add_mean_mul_pow_rsqrt_1 = async_compile.triton('triton_per_fused_add_mean_mul_pow_rsqrt_1', \'\'\'
def triton_per_fused_add_mean_mul_pow_rsqrt_1(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel): pass
\'\'\')
triton_poi_fused_mul_silu_2 = async_compile.triton('triton_poi_fused_mul_silu_2', \'\'\'...\'\'\')
class Runner:
    def call(self, args):
        extern_kernels.mm(buf0, buf1, out=buf2)
        triton_per_fused_add_mean_mul_pow_rsqrt_1.run(buf2, stream=stream0)
        buf3 = torch.ops.aten._scaled_dot_product_flash_attention.default(buf2, buf2, buf2)
        triton_per_fused_add_mean_mul_pow_rsqrt_1.run(buf3, stream=stream0)
        triton_poi_fused_mul_silu_2.run(buf3, stream=stream0)
# AOT ID: ['0_backward']
cpp_fused__log_softmax__log_softmax_backward_data_nll_loss_backward_0 = async_compile.cpp_pybinding(['float*'], r\'\'\'
extern "C" void kernel(float* out) {}
\'\'\')
def call(args):
    cpp_fused__log_softmax__log_softmax_backward_data_nll_loss_backward_0(buf0)
    extern_kernels.addmm(b, x, w, out=y)
'''


def test_output_code_is_split_into_graphs_kernels_and_library_calls():
    parsed = cr.parse(OUTPUT)
    got = {(k.graph, k.name, k.call_sites, k.job, k.reads) for k in parsed["kernels"]}
    assert got == {("forward", "triton_per_fused_add_mean_mul_pow_rsqrt_1", 2, "RMSNorm", 4),
                   ("forward", "triton_poi_fused_mul_silu_2", 1, "SwiGLU", None),
                   ("backward", "cpp_fused__log_softmax__log_softmax_backward_data_nll_loss_backward_0", 1,
                    "cross-entropy", 0)}
    assert parsed["library_calls"] == {"forward: extern_kernels.mm": 1,
                                       "forward: torch.ops.aten._scaled_dot_product_flash_attention": 1,
                                       "backward: extern_kernels.addmm": 1}
    s = cr.summary(parsed)
    assert s["graphs"] == {"forward": {"kernels": 2, "launches": 3}, "backward": {"kernels": 1, "launches": 1}}
    assert s["gemm_library_calls"] == 2 and s["attention_library_calls"] == 1 and s["cross_op_fusions"] == 1


@pytest.fixture(scope="module")
def captured():
    # One compile of GPT_TINY's training step on the CPU (C++ kernels): tens of seconds.
    tc = tr.TrainConfig(steps=1, batch=2, seq_len=16, corpus_bytes=4000, amp=False)
    return cr.capture(TINY, tc)


@pytest.mark.slow
def test_compiled_training_step_fuses_norms_with_residual_adds_and_calls_libraries_for_attention(captured):
    parsed = cr.parse(captured["code"])
    graphs = {k.graph for k in parsed["kernels"]}
    assert {"forward", "backward"} <= graphs
    jobs = {k.job for k in parsed["kernels"]}
    assert {"RMSNorm", "SwiGLU", "cross-entropy", "RoPE"} <= jobs, jobs
    # Inductor fuses across the course's op boundaries: the residual add goes into the next norm.
    assert any(k.job == "RMSNorm" and k.cross_op and "residual add" in k.cross_op for k in parsed["kernels"])
    # ... and does not generate attention or GEMMs: those stay library calls.
    s = cr.summary(parsed)
    assert s["attention_library_calls"] >= 2 * TINY.n_layers and s["gemm_library_calls"] > 0
    assert "Attention" not in jobs
    # The forward launches an RMSNorm kernel for each norm of the model (2 per layer + the final one;
    # 5 here on the CPU; a GPU's code generator may split a norm's reduction into more kernels).
    norms = sum(k.call_sites for k in parsed["kernels"] if k.graph == "forward" and k.job == "RMSNorm")
    assert norms >= 2 * TINY.n_layers + 1


@pytest.mark.slow
def test_reading_record_and_its_table(captured):
    record = cr.reading_record(captured)
    assert record["benchmark"] == "compile_reading_week5" and record["rows"]
    text = cr.reading_markdown(record)
    assert "generated kernels" in text and "residual add" in text and "extern_kernels.mm" in text


@pytest.mark.gpu(reason="compiles a one-layer GPT_SMALL to Triton and profiles its kernels")
def test_gpu_reading_times_every_generated_kernel(tmp_path):
    # One layer, not GPT_SMALL's eight: the same kernels (Inductor defines each distinct kernel
    # once, and the layers are alike) in a graph an eighth the size to trace, lower and compile
    # (the eight-layer reading took 58 s on the H100). `python -m week5_integration.compile_reading`
    # reads the full model.
    record = cr.reading_run(tmp_path, cfg=m.config(m.GPT_SMALL, n_layers=1))
    timed = [r for r in record["rows"] if r["size"] in ("forward", "backward")]
    generated = len(record["all_kernels"])
    # The profiled step is compiled from the same function and inputs: the same kernel names.
    assert len(timed) >= 0.9 * generated, (len(timed), generated)
    assert all(r["ms"] > 0 and r["variant"].startswith("triton_") for r in timed)
    assert record["summary"]["attention_library_calls"] > 0
    assert (tmp_path / "compile_week5_output_code.py").read_text().count("async_compile.triton(") == \
        sum(v["kernels"] for v in record["summary"]["graphs"].values())
