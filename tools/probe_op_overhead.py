"""Probe (GPU): what does each way of exposing a Triton kernel to PyTorch cost per call?

Measures, for RMSNorm bf16 (the smallest real op of a model), the host cost per call at 8x768
(wall time of 300 calls, then one synchronize: the GPU work is ~3 us, so the host is the
bottleneck), fwd+bwd host cost, and fwd+bwd GPU time at model shapes, for:
  torch (F.rms_norm), the course's current rms_norm, a bare JIT launch, alloc+launch,
  a slim autograd.Function, torch.library.custom_op (+register_autograd), triton_op+wrap_triton,
  and a CompiledKernel launched directly.
Also: does torch.compile(fullgraph=True) trace each registered form, and what does it cost.
Writes nothing but stdout (and $OUT/probe.json when OUT is set).
"""
from __future__ import annotations

import json
import os
import statistics
import time
import traceback

import torch
import torch.nn.functional as F

from course.gpu import triton, tl
from week4_triton_dl.norms import layernorm as ln
from week4_triton_dl.norms import rmsnorm as rn

DEV = "cuda"
RESULTS = {}


def host_us(fn, calls=300, reps=7):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def gpu_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def record(section, name, value):
    RESULTS.setdefault(section, {})[name] = value
    print(f"{section:28s} {name:34s} {value if isinstance(value, str) else f'{value:10.2f}'}", flush=True)


def attempt(section, name, fn):
    try:
        record(section, name, fn())
    except Exception as error:  # noqa: BLE001 - a probe reports every failure and goes on
        record(section, name, f"FAILED {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        traceback.print_exc(limit=3)


# ------------------------------------------------------------------ the slim variants
EPS = 1e-5


def alloc_launch(x, w):
    M, N = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    rn.rmsnorm_fwd_row_kernel[(M,)](x, w, y, rstd, N, EPS, HAS_WEIGHT=True,
                                    BLOCK_N=triton.next_power_of_2(N), ACC=tl.float32, num_warps=4)
    return y, rstd


def slim_backward(dy, x, w, rstd):
    return rn.rms_norm_backward(dy, x, rstd, w)


class SlimFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        y, rstd = alloc_launch(x, w)
        ctx.save_for_backward(x, w, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        return slim_backward(dy, x, w, rstd)


@torch.library.custom_op("probe::rms_fwd", mutates_args=())
def rms_fwd_op(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return alloc_launch(x, w)


@rms_fwd_op.register_fake
def _(x, w):
    return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("probe::rms_bwd", mutates_args=())
def rms_bwd_op(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return slim_backward(dy, x, w, rstd)


@rms_bwd_op.register_fake
def _(dy, x, w, rstd):
    return torch.empty_like(x), torch.empty_like(w)


def _setup(ctx, inputs, output):
    x, w = inputs
    ctx.save_for_backward(x, w, output[1])


def _bwd(ctx, dy, _drstd):
    x, w, rstd = ctx.saved_tensors
    return rms_bwd_op(dy.contiguous(), x, w, rstd)


rms_fwd_op.register_autograd(_bwd, setup_context=_setup)


def custom_rms(x, w):
    return rms_fwd_op(x, w)[0]


@torch.library.triton_op("probe::rms_fwd_t", mutates_args=())
def rms_fwd_t(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    M, N = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    torch.library.wrap_triton(rn.rmsnorm_fwd_row_kernel)[(M,)](
        x, w, y, rstd, N, EPS, HAS_WEIGHT=True, BLOCK_N=triton.next_power_of_2(N), ACC=tl.float32, num_warps=4)
    return y, rstd


rms_fwd_t.register_autograd(_bwd, setup_context=_setup)


def triton_op_rms(x, w):
    return rms_fwd_t(x, w)[0]


def main():
    torch.manual_seed(0)
    M, N = 8, 768
    x = torch.randn(M, N, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(N, device=DEV, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rstd = torch.empty(M, device=DEV)
    bn = triton.next_power_of_2(N)

    # ------------------------------------------------------------ host cost, forward
    sec = "host_us fwd 8x768"
    attempt(sec, "torch.add", lambda: host_us(lambda: torch.add(x, x)))
    attempt(sec, "torch.empty_like", lambda: host_us(lambda: torch.empty_like(x)))
    attempt(sec, "F.rms_norm", lambda: host_us(lambda: F.rms_norm(x, (N,), w, EPS)))
    attempt(sec, "F.layer_norm", lambda: host_us(lambda: F.layer_norm(x, (N,), w, w, EPS)))
    attempt(sec, "course rms_norm (current)", lambda: host_us(lambda: rn.rms_norm(x, (N,), w, EPS)))
    attempt(sec, "course layer_norm (current)", lambda: host_us(lambda: ln.layer_norm(x, (N,), w, w, EPS)))
    attempt(sec, "course rms_norm_forward", lambda: host_us(lambda: rn.rms_norm_forward(x, w, EPS)))
    attempt(sec, "bare JIT launch", lambda: host_us(lambda: rn.rmsnorm_fwd_row_kernel[(M,)](
        x, w, y, rstd, N, EPS, HAS_WEIGHT=True, BLOCK_N=bn, ACC=tl.float32, num_warps=4)))
    attempt(sec, "alloc + JIT launch", lambda: host_us(lambda: alloc_launch(x, w)))
    attempt(sec, "slim autograd.Function", lambda: host_us(lambda: SlimFn.apply(x, w)))
    attempt(sec, "custom_op", lambda: host_us(lambda: custom_rms(x, w)))
    attempt(sec, "custom_op via torch.ops", lambda: host_us(lambda: torch.ops.probe.rms_fwd(x, w)))
    attempt(sec, "triton_op", lambda: host_us(lambda: triton_op_rms(x, w)))

    def compiled_kernel():
        ck = rn.rmsnorm_fwd_row_kernel.warmup(x, w, y, rstd, N, EPS, HAS_WEIGHT=True, BLOCK_N=bn,
                                              ACC=tl.float32, num_warps=4, grid=(M,))
        run = ck[(M, 1, 1)]
        run(x, w, y, rstd, N, EPS, True, bn, tl.float32)
        torch.cuda.synchronize()
        ref = F.rms_norm(x, (N,), w, EPS)
        err = (y.float() - ref.float()).abs().max().item()
        print("compiled-kernel launch max err", err)
        return host_us(lambda: run(x, w, y, rstd, N, EPS, True, bn, tl.float32))
    attempt(sec, "CompiledKernel direct", compiled_kernel)

    # ------------------------------------------------------------ host cost, fwd+bwd
    sec = "host_us fwd+bwd 8x768"
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)
    dy = torch.randn_like(x)

    def fb(fn):
        return lambda: torch.autograd.grad(fn(xg, wg), (xg, wg), dy)
    attempt(sec, "F.rms_norm", lambda: host_us(fb(lambda a, b: F.rms_norm(a, (N,), b, EPS)), calls=100))
    attempt(sec, "course rms_norm (current)", lambda: host_us(fb(lambda a, b: rn.rms_norm(a, (N,), b, EPS)), calls=100))
    attempt(sec, "slim autograd.Function", lambda: host_us(fb(SlimFn.apply), calls=100))
    attempt(sec, "custom_op", lambda: host_us(fb(custom_rms), calls=100))
    attempt(sec, "triton_op", lambda: host_us(fb(triton_op_rms), calls=100))
    attempt(sec, "course rms_norm_backward alone", lambda: host_us(
        lambda: rn.rms_norm_backward(dy, x, rn.rms_norm_forward(x, w, EPS)[1], w), calls=100))

    # ------------------------------------------------------------ compile
    sec = "compile fullgraph"

    def block(norm):
        def f(h, r, w_):
            return norm(h + r, w_) * 2.0
        return f

    h = torch.randn(8192, 768, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn_like(h)
    wc = torch.randn(768, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    dyc = torch.randn_like(h)
    for name, norm in (("torch F.rms_norm", lambda a, b: F.rms_norm(a, (768,), b, EPS)),
                       ("custom_op", custom_rms), ("triton_op", triton_op_rms),
                       ("slim autograd.Function", SlimFn.apply),
                       ("course rms_norm (current)", lambda a, b: rn.rms_norm(a, (768,), b, EPS))):
        def run_compiled(norm=norm):
            torch._dynamo.reset()
            fn = torch.compile(block(norm), fullgraph=True)
            t0 = time.perf_counter()
            out = fn(h, r, wc)
            torch.autograd.grad(out, (h, wc), dyc)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            ref = block(lambda a, b: F.rms_norm(a, (768,), b, EPS))(h, r, wc)
            err = (out.float() - ref.float()).abs().max().item()
            ms = gpu_ms(lambda: torch.autograd.grad(fn(h, r, wc), (h, wc), dyc))
            return f"ok: fwd+bwd {ms * 1e3:.1f} us at 8192x768, compile {compile_s:.1f} s, max err {err:.3g}"
        attempt(sec, name, run_compiled)
    for name, norm in (("eager torch", lambda a, b: F.rms_norm(a, (768,), b, EPS)),
                       ("eager custom_op", custom_rms), ("eager slim", SlimFn.apply)):
        f = block(norm)
        attempt(sec, name + " (us)", lambda f=f: gpu_ms(lambda: torch.autograd.grad(f(h, r, wc), (h, wc), dyc)) * 1e3)

    # ------------------------------------------------------------ GPU time at model shapes
    sec = "fwd+bwd GPU us"
    for (Mm, Nn) in ((8192, 768), (65536, 768), (16384, 1024), (16384, 4096)):
        xx = torch.randn(Mm, Nn, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        ww = torch.randn(Nn, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        dd = torch.randn_like(xx)
        tcomp = torch.compile(lambda a, b: F.rms_norm(a, (a.shape[-1],), b, EPS))
        for name, fn in (("torch", lambda a, b: F.rms_norm(a, (a.shape[-1],), b, EPS)),
                         ("torch.compile", tcomp),
                         ("course current", lambda a, b: rn.rms_norm(a, (a.shape[-1],), b, EPS)),
                         ("custom_op", custom_rms)):
            attempt(sec, f"{Mm}x{Nn} {name}", lambda fn=fn: gpu_ms(
                lambda: torch.autograd.grad(fn(xx, ww), (xx, ww), dd)) * 1e3)
        attempt(sec, f"{Mm}x{Nn} course fwd kernel", lambda: gpu_ms(lambda: rn.rms_norm_forward(xx.detach(), ww.detach(), EPS)) * 1e3)
        _, rs = rn.rms_norm_forward(xx.detach(), ww.detach(), EPS)
        attempt(sec, f"{Mm}x{Nn} course bwd kernels", lambda: gpu_ms(lambda: rn.rms_norm_backward(dd, xx.detach(), rs, ww.detach())) * 1e3)

    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "probe.json"), "w") as f:
            json.dump(RESULTS, f, indent=1)


if __name__ == "__main__":
    main()
