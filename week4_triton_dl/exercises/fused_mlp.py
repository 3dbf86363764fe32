"""Exercise: epilogue fusion in a Transformer MLP. Same names as week4_triton_dl/fused_mlp.py.
Check your work with `pytest tests/week4/test_fused_mlp.py --impl=exercises`.

Suggested order: `act_backward_kernel` (+ `_act_and_grad`) and `act_backward`, then
`LinearActFunction` / `linear_act` on top of week 3's `matmul` epilogue; then the dual GEMM
`swiglu_gate_up_kernel` with `swiglu_gate_up`, `swiglu_backward_kernel` with `swiglu_backward`,
and `SwiGLUMLPFunction` / `swiglu_mlp`; finally `activation_bytes` (count them yourself first).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401
from week3_triton_kernels import matmul as week3_matmul

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LINEAR_DTYPES = (torch.float16, torch.bfloat16)
BACKWARD_ACTIVATIONS = {"relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
ACTIVATIONS = tuple(a for a in week3_matmul.ACTIVATIONS if a in BACKWARD_ACTIVATIONS)
ELEMENTWISE_BLOCK = 1024
AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=8),
]
SMALL_PROBLEM = 512 * 512
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


@triton.jit
def _act_and_grad(z, ACTIVATION: tl.constexpr):
    """act'(z) for ACTIVATION 1 relu, 2 gelu (erf), 3 gelu_tanh, 4 silu; z is fp32."""
    # TODO (relu: let NaN through, as torch: where(z <= 0, 0, 1))
    pass


@triton.jit
def act_backward_kernel(dy_ptr, z_ptr, dz_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    """dz = dy * act'(z), element-wise."""
    # TODO
    pass


@triton.jit
def swiglu_backward_kernel(dh_ptr, g_ptr, u_ptr, dgu_ptr, n, n_cols, BLOCK: tl.constexpr):
    """dgu[:, :F] = dh * u * silu'(g), dgu[:, F:] = dh * silu(g)."""
    # TODO
    pass


@triton.jit
def swiglu_gate_up_kernel(x_ptr, w_ptr, h_ptr, g_ptr, u_ptr, M, F, K,
                          stride_xm, stride_xk, stride_wf, stride_wk, stride_hm,
                          STORE_GU: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    """Two accumulators from one x tile (gate rows [0, F) and up rows [F, 2F) of w); h = silu(g) * u."""
    # TODO: week 3's tiled matmul with a second tl.dot per K step; the epilogue writes h
    # (and g, u when STORE_GU).
    pass


swiglu_gate_up_kernel_autotuned = swiglu_gate_up_kernel  # TODO: triton.autotune(...)(swiglu_gate_up_kernel)


def swiglu_gate_up(x, w_gate_up, *, store_gu=False, out=None):
    """h = silu(x @ W_gate^T) * (x @ W_up^T) in one kernel; returns h, or (h, g, u) with store_gu."""
    raise NotImplementedError("not implemented yet: swiglu_gate_up (week4 exercise)")


def swiglu_backward(dh, g, u):
    """[dg du] (N, 2F) from dh, g, u (N, F)."""
    raise NotImplementedError("not implemented yet: swiglu_backward (week4 exercise)")


def act_backward(dy, z, activation):
    """dz = dy * act'(z)."""
    raise NotImplementedError("not implemented yet: act_backward (week4 exercise)")


def linear_act(x, weight, bias=None, activation="gelu"):
    """activation(F.linear(x, weight, bias)) with bias and activation in the matmul epilogue."""
    raise NotImplementedError("not implemented yet: linear_act (week4 exercise)")


def linear_act_torch(x, weight, bias=None, activation="gelu"):
    """The eager pair the fused launch replaces."""
    z = F.linear(x, weight, bias)
    if activation == "relu":
        return torch.relu(z)
    if activation == "silu":
        return F.silu(z)
    return F.gelu(z, approximate="tanh" if activation == "gelu_tanh" else "none")


def swiglu_mlp(x, w_gate_up, w_down):
    """(silu(x Wg^T) * (x Wu^T)) Wd^T with w_gate_up = [Wg; Wu] (2F, d), w_down (d, F)."""
    raise NotImplementedError("not implemented yet: swiglu_mlp (week4 exercise)")


def swiglu_mlp_torch(x, w_gate_up, w_down):
    """The eager module's arithmetic: three F.linear, silu, multiply."""
    w_gate, w_up = w_gate_up.chunk(2, dim=0)
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


class SwiGLUMLP(torch.nn.Module):
    """A Llama-style feed-forward block: d -> 2F (gate, up) -> silu(gate) * up -> d, no biases."""

    def __init__(self, d_model, d_hidden, *, device=None, dtype=None):
        super().__init__()
        self.w_gate_up = torch.nn.Parameter(torch.empty(2 * d_hidden, d_model, device=device, dtype=dtype))
        self.w_down = torch.nn.Parameter(torch.empty(d_model, d_hidden, device=device, dtype=dtype))
        torch.nn.init.normal_(self.w_gate_up, std=d_model ** -0.5)
        torch.nn.init.normal_(self.w_down, std=d_hidden ** -0.5)

    def forward(self, x):
        return swiglu_mlp(x, self.w_gate_up, self.w_down)


class SwiGLUMLPTorch(torch.nn.Module):
    """The unfused reference module: gate, up and down nn.Linear layers."""

    def __init__(self, d_model, d_hidden, *, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate = torch.nn.Linear(d_model, d_hidden, **kw)
        self.up = torch.nn.Linear(d_model, d_hidden, **kw)
        self.down = torch.nn.Linear(d_hidden, d_model, **kw)

    @classmethod
    def from_fused(cls, fused):
        d_hidden, d_model = fused.w_down.shape[1], fused.w_down.shape[0]
        module = cls(d_model, d_hidden, device=fused.w_down.device, dtype=fused.w_down.dtype)
        w_gate, w_up = fused.w_gate_up.detach().chunk(2, dim=0)
        with torch.no_grad():
            module.gate.weight.copy_(w_gate)
            module.up.weight.copy_(w_up)
            module.down.weight.copy_(fused.w_down.detach())
        return module

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def activation_bytes(n, d, f, itemsize):
    """Activation traffic of one forward: keys linear_gelu_torch, linear_gelu_fused, swiglu_torch,
    swiglu_fused_inference, swiglu_fused_training."""
    raise NotImplementedError("not implemented yet: activation_bytes (week4 exercise)")
