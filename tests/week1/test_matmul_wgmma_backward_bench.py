"""week1_cuda_python.matmul_wgmma_backward_bench on the CPU: the GEMMs it times are the capstone's backward ones, laid
out as the backward has them, and it refuses to run where the sm_90a kernels cannot."""
import pytest
import torch

from course import runtime
from tests.week1.test_matmul_wgmma_persistent import TOKENS
from week1_cuda_python import matmul_wgmma_backward_bench as bb  # a bench and the arithmetic: no exercise of their own
from week1_cuda_python import matmul_wgmma_waves as waves


@pytest.mark.parametrize("linear", list(bb.LINEARS))
def test_shapes_are_each_linears_backward(linear):
    """y = x W^T with W out x in: dX = dY W is tokens x in over out, dW = dY^T X is out x in over the tokens; the wave
    arithmetic has the same shapes (the note cites it for them)."""
    out_features, in_features = bb.LINEARS[linear]
    assert bb.gemm_shape(linear, "dx") == (TOKENS, in_features, out_features)
    assert bb.gemm_shape(linear, "dw") == (out_features, in_features, TOKENS)
    if linear != "lm_head":  # its dW is in the waves file as X^T dY, lm_head_dw
        assert tuple(waves.SHAPES[f"{linear}_dw"]) == bb.gemm_shape(linear, "dw")
        assert tuple(waves.SHAPES[f"{linear}_dx"]) == bb.gemm_shape(linear, "dx")


def test_inputs_have_the_backwards_layouts():
    """dW's A is the transposed view of a row-major dY (the a_col entry's layout), never a copy; dX's is row-major."""
    a, b, c = bb.inputs_for("dw")(((64, 48, 32), torch.bfloat16))
    assert a.shape == (64, 32) and not a.is_contiguous() and a.t().is_contiguous()
    assert b.shape == (32, 48) and b.is_contiguous() and c.shape == (64, 48)
    a, _, _ = bb.inputs_for("dx")(((64, 48, 32), torch.bfloat16))
    assert a.shape == (64, 32) and a.is_contiguous()


def test_variants_per_kind():
    """cuBLAS beside the rung: for dX the rule's build and both schedules; for dW the a_col entry at every width (the
    ping-pong schedule refuses a column-major A); split-K at two widths and at the plan's width, for both."""
    split_k = ["wgmma_split_k", "wgmma_split_k_bn128", "wgmma_split_k_planned"]
    assert list(bb.variants("dx")) == ["torch", "wgmma_rule", "wgmma_persistent", "wgmma_pingpong", *split_k]
    assert list(bb.variants("dw")) == ["torch", "wgmma_persistent", "wgmma_persistent_bn192", "wgmma_persistent_bn128",
                                       *split_k]


def test_split_rows_name_their_ranges(monkeypatch):
    """A split-K row carries the plan's ranges (the note reads them); the attention projection's dW is split."""
    monkeypatch.setattr(runtime, "sm_count", lambda: 132)
    shape = bb.gemm_shape("proj", "dw")
    assert bb.split_count(shape, "wgmma_split_k") > 1 and bb.split_count(shape, "wgmma_persistent") == 1
    assert bb.split_count(shape, "wgmma_split_k_bn128") >= 1


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="linear must be one of"):
        bb.gemm_shape("mlp", "dx")
    with pytest.raises(ValueError, match="kind one of"):
        bb.gemm_shape("proj", "dy")


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the refusal where no sm_90a GPU is")
def test_refuses_to_time_without_a_hopper_gpu():
    with pytest.raises(RuntimeError, match="H100/H200"):
        bb.run(["proj"], 1, 1.0)
