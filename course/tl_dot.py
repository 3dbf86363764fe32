"""`dot`: tl.dot for every dtype the course's kernels take, float64 included.

float16, bfloat16 and float32 go to tl.dot unchanged. float64 takes a broadcast multiply and a
sum over K instead: exact float64 FMAs on any GPU and in the interpreter.

Why not tl.dot for float64: Triton 3.6 (the one torch 2.11 pins on the H100 of 2026-11-23)
lowers a float64 tl.dot on sm_90 to `mma.sync.m16n8k16.f64` (read in the PTX it compiles for
sm_90), and every float64 test built on tl.dot failed on that H100 (LoRA, FlashAttention forward
and gradcheck; the run kept their names, not their messages) while the same kernels passed in
float16, bfloat16 and float32 there and in float64 in the interpreter. Triton 3.9 emits `m8n8k4`
instead (triton-lang/triton PR #10060 reworked the float64 MMA path). float64 exists here to
check an algorithm with rounding out of the way, not for speed, so the FMA form costs nothing
that matters.

Cost of the broadcast form: an (M, K, N) product tile in registers, so float64 launches use
small tiles (16 x 16 in the kernels that take float64).
"""
from course.gpu import triton, tl


@triton.jit
def dot(a, b, acc, INPUT_PRECISION: tl.constexpr):
    """a @ b (+ acc when acc is not None): (M, K) x (K, N) -> (M, N), accumulated in acc's dtype."""
    if a.dtype == tl.float64:
        product = tl.sum(a[:, :, None] * b[None, :, :], axis=1)
        if acc is not None:
            product = acc + product
        return product
    else:
        return tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
