"""int8 weight-only quantization: half the bytes of every weight, dequantized inside the matmul.

Over 500 lines: the two kernels with their launch settings and launchers, the QuantLinear module
and whole-model conversion, and the accuracy report, one lesson. Its benchmark, tile sweep and
command line: quantization_bench.py.

Decoding one token at a time multiplies a handful of activation rows (batch 1..16) by every
weight matrix of the model. Each weight element is used for 2 x M FLOPs (M = rows) after being
read once: at M = 16 that is 32 FLOPs per bf16 byte, far left of the H100's ridge point (722
TFLOP/s / 3.0 TB/s = 240 FLOP/byte). So decoding is *weight-bandwidth-bound*: its time is the
weights' bytes over the memory bandwidth. Store the weights in int8 and there are half as many
bytes to read: up to 2x faster, if the kernel reads the int8 bytes directly and never writes a
dequantized copy back to memory.

The scheme (symmetric, per output channel; the recipe of LLM.int8's baseline and of gpt-fast):
for each row n of W (N x K, `nn.Linear`'s layout: one row per output feature)
    s[n] = max_k |W[n, k]| / 127,    q[n, k] = round(W[n, k] / s[n])  in [-127, 127]   (int8)
and W ~ deq(q) = q * s[:, None]. Rounding to the nearest integer makes the error of every
element at most half a step: |W - deq(q(W))| <= s / 2 (see `quantize_int8`). -128 is unused so
that the grid is symmetric around 0 and -q never overflows.

Because the scale belongs to an output channel, it factors out of the dot product:
    y[m, n] = sum_k x[m, k] * q[n, k] * s[n] = s[n] * sum_k x[m, k] * q[n, k]
so the matmul can run on the integers (converted to x's dtype, exactly: bf16 and fp16 hold every
integer up to 256) and multiply by s[n] once, in the epilogue.

The kernels, simplest first (diff them):
* `int8_matmul_dequant_kernel`: each K-step loads an int8 tile of W, dequantizes it in registers
  (q * s, rounded to x's dtype) and feeds it to `tl.dot` with fp32 accumulation. The literal
  "dequantize inside the tile loop"; the result matches torch's dequantize-then-matmul.
* `int8_matmul_kernel`: the loop only converts q to x's dtype (exact) and the scale multiplies
  the fp32 accumulator once at the end: BLOCK_N x BLOCK_K fewer multiplies per step and no
  rounding of the dequantized weight. `int8_matmul` launches it; `QuantLinear` uses it.
Grid order: program ids run over the M blocks first, so the programs that read the same weight
strip (same N block) run side by side and all but the first find it in L2.

Cost model, x (M x K) in 16-bit, W (N x K), y (M x N):
    bf16 matmul:           2NK + 2MK + 2MN bytes
    int8 weight-only:       NK + 4N + 2MK + 2MN bytes   (q, the fp32 scales, x, y)
    torch dequant + matmul: NK + 2NK (write deq) + 2NK (read deq) + ...  = ~5NK bytes: 2.5x the
                            int8 kernel and slower than plain bf16: the bf16 copy is the problem.
FLOPs 2MNK for all. At M <= 16 and K, N in the thousands the weight term is > 99% of the bytes,
so the prediction is int8 / bf16 time = (NK + 4N) / 2NK ~ 0.5: ~2x faster if both reach the same
fraction of the copy bandwidth (cuBLAS's GEMV reaches ~85-90% on an H100; a Triton kernel that
pads M up to 16 rows for `tl.dot` does 16/M times the arithmetic it needs, which is still free
at 32 FLOP/byte). The benchmark `int8_matmul_week5` measures it; `python -m
week5_integration.quantization_bench --sweep` times tile shapes and writes the fastest to
results/tuned_int8_matmul.json, which `config_for` reads on the GPU it was measured on.

Accuracy (`quantization_report`): the per-element error is uniform in [-s/2, s/2], RMS s/sqrt(12).
For Gaussian rows of K values, max |w| is ~3 standard deviations (K ~ 1000), so s ~ 3 sigma /
127 and the relative RMS error of a weight is ~0.7%; a dot product of K such terms has a relative
error of about the same size (the errors are independent). Logits move by ~1%, the loss by far
less. Outliers (one huge weight in a row) stretch s for the whole row: why LLM.int8 and AWQ
treat them separately (Dettmers et al. 2022, arXiv:2208.07339; Lin et al. 2023, arXiv:2306.00978).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import runtime, tuning, validate
from course.gpu import triton, tl

X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
QMAX = 127  # symmetric int8 grid: -127..127
# The accuracy bounds of an int8 twin (`quantization_report`; the error model under "Accuracy" in the
# docstring: logits move by ~1%): norm-wise relative error of the logits, relative change of the
# validation loss. Wide enough for the model's ~1%, tight enough to catch a wrong scale, a transposed
# weight or a lost row (errors of order 1). The int8 package (aot_quant.py) is held to the same.
LOGITS_REL_ERR = 0.03
LOSS_REL_CHANGE = 0.01


# ------------------------------------------------------------------------------- quantizing
def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): per-output-channel symmetric int8 of a 2-D weight W (N x K).

    scale[n] = max_k |W[n, k]| / 127 (fp32) and q = round(W / scale) in int8, so that
    |W - q * scale| <= scale / 2 everywhere. An all-zero row gets scale 1 (and q = 0), not a
    division by zero. Computed in float32 whatever W's dtype (bf16 rows would round the scale).
    """
    validate.tensor(w, "w", dtypes=X_DTYPES + (torch.float64,), ndim=2, contiguous=False)
    w32 = w.detach().float()
    if not torch.isfinite(w32).all():
        raise ValueError("w holds NaN or Inf: a scale of max|w| / 127 would be meaningless; "
                         "fix the weights before quantizing")
    # BEGIN EXERCISE: in float32: amax per row (K = 0: no weights, amax 0), scale = amax / 127 (1 where amax
    #   is 0), q = round(w / scale) clamped to [-127, 127], int8; return both contiguous
    # HINT: Per-output-channel symmetric int8: each row of W gets its own scale so its largest magnitude
    #   maps to 127; with one scale per row, the dequantization later factors out of the K sum.
    # HINT: amax over dim 1 (zeros when K is 0); scale = amax / 127, but 1 where amax is 0 (no 0/0); divide
    #   row-wise with scale[:, None], round, clamp to [-127, 127], cast to int8; return both contiguous.
    # HINT: `q = torch.round(w32 / scale[:, None]).clamp_(-QMAX, QMAX).to(torch.int8)`
    amax = w32.abs().amax(dim=1) if w32.shape[1] else w32.new_zeros(w32.shape[0])  # K = 0: no weights
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    # torch.round rounds half to even; either tie direction keeps the error within scale / 2.
    q = torch.round(w32 / scale[:, None]).clamp_(-QMAX, QMAX).to(torch.int8)
    return q.contiguous(), scale.contiguous()
    # END EXERCISE


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q * scale[:, None] in `dtype` (the product is formed in fp32 and rounded once)."""
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.dim() != 2:
        raise TypeError(f"q must be a 2-D int8 tensor, got {getattr(q, 'dtype', type(q).__name__)} "
                        f"{tuple(getattr(q, 'shape', ()))}")
    if not isinstance(scale, torch.Tensor) or scale.shape != (q.shape[0],):
        raise ValueError(f"scale must have shape ({q.shape[0]},): one per row of q")
    return (q.float() * scale.float()[:, None]).to(dtype)


def dequant_matmul_torch(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The torch way, and the reference: materialize deq(q) in x's dtype, then x @ deq^T.

    Writes and re-reads a full-precision copy of W on every call: ~5 bytes per weight element.
    """
    return x @ dequantize_int8(q, scale, x.dtype).t()


# ----------------------------------------------------------------------------------- kernels
@triton.jit
def _tile_offsets(M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # M blocks vary fastest: neighbouring programs share a weight strip (pid_n), so W is read
    # from HBM about once and the other M blocks of that strip hit in L2.
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_n = pid // num_m
    return pid_m * BLOCK_M + tl.arange(0, BLOCK_M), pid_n * BLOCK_N + tl.arange(0, BLOCK_N)


@triton.jit
def _dot(x, w, acc, EXACT_FP32: tl.constexpr):
    if EXACT_FP32:
        # fp32 inputs would otherwise go through TF32 tensor cores (10-bit mantissa).
        acc = tl.dot(x, w, acc, input_precision="ieee")
    else:
        acc = tl.dot(x, w, acc)  # fp16/bf16 inputs, fp32 accumulation on the tensor cores
    return acc


@triton.jit
def int8_matmul_dequant_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, M, N, K, stride_xm, stride_qn, stride_ym,
                               EXACT_FP32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr):
    # BEGIN EXERCISE: the dequantizing tile loop: offs_m, offs_n = _tile_offsets(...); pointers to x
    #   (BLOCK_M, BLOCK_K) and to W^T's tile (BLOCK_K, BLOCK_N) of the (N, K) int8 weight; load the N
    #   block's scales; loop over K: masked loads (other=0), w = (q.to(fp32) * scale).to(x.dtype), acc =
    #   _dot(...); store acc in y's dtype, masked to M and N
    # HINT: Weight-only quantization reads int8 weights (half the bytes of fp16) and dequantizes each W^T
    #   tile in registers just before the tensor-core dot: the full-precision W never exists in memory.
    # HINT: Offsets from _tile_offsets, m/n masks; x tile pointers (int64 row times stride) and a (BLOCK_K,
    #   BLOCK_N) view of W^T (n times stride_qn, plus k); load the N block's scales once; K loop with masked
    #   loads, dequantize, _dot; masked store in y's dtype.
    # HINT: `w = (q.to(tl.float32) * scale[None, :]).to(x.dtype)`
    offs_m, offs_n = _tile_offsets(M, BLOCK_M, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask, n_mask = offs_m < M, offs_n < N
    # int64 before multiplying by a stride: M * K passes 2^31 for large prefill batches.
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    # W^T's tile as a (BLOCK_K, BLOCK_N) view of the row-major (N, K) int8 weight: along K the
    # bytes are contiguous, so each row of W is read in 16-byte vectors (16 weights per load).
    q_ptrs = q_ptr + offs_n[None, :].to(tl.int64) * stride_qn + offs_k[:, None]
    scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        x = tl.load(x_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        q = tl.load(q_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0)
        # Dequantize in registers: this full-precision W tile never exists in memory.
        w = (q.to(tl.float32) * scale[None, :]).to(x.dtype)
        acc = _dot(x, w, acc, EXACT_FP32)
        x_ptrs += BLOCK_K
        q_ptrs += BLOCK_K
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])
    # END EXERCISE


@triton.jit
def int8_matmul_kernel(x_ptr, q_ptr, scale_ptr, y_ptr, M, N, K, stride_xm, stride_qn, stride_ym,
                       EXACT_FP32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    # BEGIN EXERCISE: as int8_matmul_dequant_kernel, but convert q to x's dtype (exact) in the loop and
    #   multiply the fp32 accumulator by the scales once, after the loop
    # HINT: Because the scale is per output column, it factors out of the K sum: multiply by int8 values
    #   converted to x's dtype (exact: -127..127 fit fp16/bf16) and apply the scales once, after the loop.
    # HINT: Same pointers and K loop as the dequantizing kernel, but the dot takes q.to(x.dtype) directly;
    #   after the loop load the scales and multiply acc by scale[None, :]; store masked.
    # HINT: `acc = acc * scale[None, :]`: N * M multiplies instead of N * K * M / BLOCK_M dequantizations.
    offs_m, offs_n = _tile_offsets(M, BLOCK_M, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask, n_mask = offs_m < M, offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    q_ptrs = q_ptr + offs_n[None, :].to(tl.int64) * stride_qn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k0
        x = tl.load(x_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        q = tl.load(q_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0)
        # Integers -127..127 are exact in fp16 and bf16: the loop does no rounding at all.
        acc = _dot(x, q.to(x.dtype), acc, EXACT_FP32)
        x_ptrs += BLOCK_K
        q_ptrs += BLOCK_K
    # The per-output-channel scale factors out of the K sum: one multiply per output element.
    scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
    acc = acc * scale[None, :]
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])
    # END EXERCISE


# --------------------------------------------------------------------------- launch settings
@dataclass(frozen=True)
class Int8Config:
    """Tile shape and launch knobs of the int8 kernels."""
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3

    def label(self) -> str:
        return (f"BM={self.block_m:<3} BN={self.block_n:<3} BK={self.block_k:<3} "
                f"warps={self.num_warps} stages={self.num_stages}")


def _pow2_at_least(n: int, low: int) -> int:
    return max(low, triton.next_power_of_2(max(n, 1)))


def block_m_for(M: int) -> int:
    """BLOCK_M for M rows: 16 (tl.dot's minimum) up to 64, just covering M."""
    return min(64, _pow2_at_least(M, 16))


# Shared memory the pipelined tiles may take: the H100 allows 227 KB per program, a T4 64 KB;
# staying under 96 KB leaves room for the dot operands' layout conversion and 2 programs per SM.
SMEM_BUDGET = 96 * 1024


def shared_memory_bytes(config: Int8Config, itemsize: int) -> int:
    """Pipeline buffers (num_stages x (x tile + int8 W tile)) plus W's tile converted for tl.dot."""
    x_tile = config.block_m * config.block_k * itemsize
    w_tile = config.block_k * config.block_n
    return config.num_stages * (x_tile + w_tile) + w_tile * itemsize


def heuristic_config(M: int, N: int, K: int, itemsize: int = 2) -> Int8Config:
    """Tiles for a weight-bandwidth-bound matmul (a swept table, results/tuned_int8_matmul.json, overrides it).

    BLOCK_M: 16 (tl.dot's minimum) up to 64, just covering M. BLOCK_N: the widest of
    128/64/32/16 that still gives >= 2 programs per SM, so every SM streams a weight strip
    (at N = 16384 and M <= 16 that is 32 columns: 512 programs). BLOCK_K: 256 int8 values = 256
    contiguous bytes per weight row per step, halved while the pipeline's tiles exceed
    `SMEM_BUDGET` (fp32 activations in 64-row blocks take 64 KB per stage at 256).
    """
    block_m = block_m_for(M)
    programs_m = max(1, -(-M // block_m))
    want = 2 * runtime.sm_count()
    block_n = 16
    for candidate in (128, 64, 32):
        if programs_m * -(-N // candidate) >= want:
            block_n = candidate
            break
    config = Int8Config(block_m, block_n, min(256, _pow2_at_least(K, 16)), num_warps=4,
                        num_stages=4 if runtime.on_gpu() else 1)
    while shared_memory_bytes(config, itemsize) > SMEM_BUDGET and config.block_k > 32:
        config = Int8Config(block_m, block_n, config.block_k // 2, config.num_warps, config.num_stages)
    return config


# The fastest tiles per (m_bucket, N, K), m_bucket = 1, 16 or 64 (M <= bucket), with 16-bit
# activations: written by `python -m week5_integration.quantization_bench --sweep` to
# results/tuned_int8_matmul.json (GPU, versions, date), read once, used only on the GPU it was
# measured on (course/tuning.py). No file (not swept yet): `heuristic_config` everywhere.
TUNED = tuning.TunedTable(__file__, "int8_matmul", Int8Config)


def m_bucket(M: int) -> int:
    """The tuned table's row class of M rows: 1, 16 or 64 (the smallest bucket >= M, 64 beyond)."""
    return 1 if M <= 1 else 16 if M <= 16 else 64


def config_for(M: int, N: int, K: int, itemsize: int = 2) -> Int8Config:
    tuned = TUNED.get((m_bucket(M), N, K)) if itemsize == 2 else None  # swept with 16-bit activations
    return tuned or heuristic_config(M, N, K, itemsize)


# ------------------------------------------------------------------------------- launchers
def _check(x, q, scale, out):
    """Validate the operands (before any launch); return (M, N, K, out)."""
    validate.tensor(x, "x", dtypes=X_DTYPES, ndim=2)
    runtime.require_bf16_tensor_cores(x.dtype, "the int8 matmul (tl.dot)")  # before launch: a T4 refuses bf16
    validate.tensor(q, "q", dtypes=(torch.int8,), ndim=2)
    validate.tensor(scale, "scale", dtypes=(torch.float32,), ndim=1)
    M, K = x.shape
    N = q.shape[0]
    if q.shape[1] != K:
        raise ValueError(f"q has shape {tuple(q.shape)}: expected (N, {K}), one row of K = {K} weights "
                         f"per output feature (x is {tuple(x.shape)}, nn.Linear's (out, in) layout)")
    if scale.shape[0] != N:
        raise ValueError(f"scale has {scale.shape[0]} elements; expected N = {N}, one per row of q")
    if out is None:
        return M, N, K, torch.empty((M, N), dtype=x.dtype, device=x.device)
    validate.tensor(out, "out", dtypes=(x.dtype,), ndim=2)
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {(M, N)}")
    return M, N, K, out


def _check_config(config):
    if not isinstance(config, Int8Config):
        raise TypeError(f"config must be an Int8Config, got {type(config).__name__}")
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"config.{name} must be a power of two >= 16 (tl.dot's minimum), got {value!r}")


def _launch(kernel, x, q, scale, out, M, N, K, config):
    grid = (triton.cdiv(M, config.block_m) * triton.cdiv(N, config.block_n),)
    kernel[grid](x, q, scale, out, M, N, K, x.stride(0), q.stride(0), out.stride(0),
                 EXACT_FP32=x.dtype == torch.float32, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                 BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages)
    return out


def _run(kernel, x, q, scale, out, config):
    M, N, K, out = _check(x, q, scale, out)
    config = config_for(M, N, K, x.element_size()) if config is None else config
    _check_config(config)
    if M == 0 or N == 0:
        return out
    return _launch(kernel, x, q, scale, out, M, N, K, config)


def int8_matmul_dequant(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, out: torch.Tensor | None = None,
                        *, config: Int8Config | None = None) -> torch.Tensor:
    """x @ deq(q, scale)^T with W dequantized (q * scale, rounded to x's dtype) in each K step.

    x (M, K) fp16/bf16/fp32; q (N, K) int8; scale (N,) fp32; returns (M, N) in x's dtype.
    """
    return _run(int8_matmul_dequant_kernel, x, q, scale, out, config)


def int8_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, out: torch.Tensor | None = None,
                *, config: Int8Config | None = None) -> torch.Tensor:
    """x @ deq(q, scale)^T: int8 weights converted in the tile loop, the scale in the epilogue.

    x (M, K) fp16/bf16/fp32 contiguous; q (N, K) int8 and scale (N,) fp32 from `quantize_int8`;
    returns y (M, N) in x's dtype (written into `out` if given), accumulated in fp32. K = 0
    gives zeros (an empty sum). Launch settings: `config`, else `config_for(M, N, K)`.
    """
    return _run(int8_matmul_kernel, x, q, scale, out, config)


# ---------------------------------------------------------------------------- the module
KERNELS = ("triton", "triton_dequant", "torch")


class QuantLinear(nn.Module):
    """A bias-optional `nn.Linear` whose weight is stored as int8 + one fp32 scale per output.

    `kernel`: "triton" (`int8_matmul`), "triton_dequant" (`int8_matmul_dequant`) or "torch"
    (`dequant_matmul_torch`: materializes the weight, handy where Triton cannot run).
    `weight` is a read-only property giving the dequantized weight, so code that reads
    `linear.weight` directly (the GPT's fused loss reads `head.weight`) keeps working.
    """

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None, *,
                 kernel: str = "triton", dtype: torch.dtype = torch.float32):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.dim() != 2:
            raise TypeError(f"q must be a 2-D int8 tensor, got {getattr(q, 'dtype', type(q).__name__)}")
        if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32 or scale.shape != (q.shape[0],):
            raise ValueError(f"scale must be float32 of shape ({q.shape[0]},)")
        self.out_features, self.in_features = q.shape
        self.kernel, self.dtype = kernel, dtype
        self.register_buffer("qweight", q.contiguous())
        self.register_buffer("scale", scale.contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, kernel: str = "triton") -> "QuantLinear":
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        q, scale = quantize_int8(linear.weight)
        return cls(q, scale, linear.bias, kernel=kernel, dtype=linear.weight.dtype)

    @property
    def weight(self) -> torch.Tensor:
        return dequantize_int8(self.qweight, self.scale, self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x has {x.shape[-1]} features in its last dimension; expected {self.in_features}")
        flat = x.reshape(-1, self.in_features).contiguous()
        if self.kernel == "torch":
            y = dequant_matmul_torch(flat, self.qweight, self.scale)
        elif self.kernel == "triton_dequant":
            y = int8_matmul_dequant(flat, self.qweight, self.scale)
        else:
            y = int8_matmul(flat, self.qweight, self.scale)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, kernel={self.kernel!r}")


def quantize_model(model: nn.Module, *, kernel: str = "triton", skip: tuple[str, ...] = (),
                   inplace: bool = False) -> nn.Module:
    """A copy of `model` (or `model` itself with inplace=True) with every nn.Linear a QuantLinear.

    `skip` lists module names (as in `named_modules`) to leave in full precision. The GPT's
    LM head is tied to the token embedding: the head becomes int8, the embedding stays as it
    is (an embedding lookup reads one row per token, not the whole table).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    # BEGIN EXERCISE: deep-copy unless inplace; refuse `skip` names that are not nn.Linear modules
    #   (ValueError); replace every nn.Linear not skipped by QuantLinear.from_linear (setattr on its parent,
    #   found with get_submodule)
    # HINT: Swap modules by name: collect the nn.Linear names first (so the swap does not disturb the walk),
    #   validate the skip list against them, then replace each one on its parent.
    # HINT: Deep-copy unless inplace; names from named_modules filtered by isinstance nn.Linear; unknown
    #   skip names raise ValueError; for each kept name split off the parent path with rpartition("."),
    #   get_submodule the parent (the root if empty), setattr a QuantLinear.from_linear.
    # HINT: `parent_name, _, child = name.rpartition(".")`
    target = model if inplace else copy.deepcopy(model)
    names = [name for name, module in target.named_modules() if isinstance(module, nn.Linear)]
    unknown = set(skip) - set(names)
    if unknown:
        raise ValueError(f"skip names modules that are not nn.Linear layers of the model: {sorted(unknown)}")
    for name in names:
        if name in skip:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = target.get_submodule(parent_name) if parent_name else target
        setattr(parent, child, QuantLinear.from_linear(getattr(parent, child), kernel=kernel))
    return target
    # END EXERCISE


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights a forward reads: parameters and buffers (int8 weights, scales)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


# ------------------------------------------------------------------------------- accuracy
def train_briefly(cfg=None, *, steps: int = 60, batch: int = 8, lr: float = 3e-3, seed: int = 0,
                  device=None):
    """A GPT trained `steps` AdamW steps on the generated stories; returns (model, val_tokens)."""
    from week5_integration import data
    from week5_integration import model as m

    device = runtime.DEVICE if device is None else torch.device(device)
    cfg = cfg or m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)
    torch.manual_seed(seed)
    model = m.GPT(cfg).to(device)
    train, val = data.split(data.encode(data.corpus("stories", 40_000, seed=seed)))
    batches = data.Batches(train, batch, cfg.max_seq_len, seed=seed, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        x, y = batches.next()
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval(), val


@torch.no_grad()
def quantization_report(model: nn.Module, val_tokens: torch.Tensor, *, kernel: str = "triton",
                        batch: int = 8, seed: int = 1) -> dict:
    """Compare `model` with its int8 twin on one validation batch.

    Returns the norm-wise relative error of the logits, both validation losses (mean
    next-token cross-entropy, nats), the largest weight error in units of its row's scale
    (<= 0.5 by construction) and the weight bytes of both models.
    """
    from week5_integration import data

    seq_len = model.cfg.max_seq_len
    device = next(model.parameters()).device
    x, y = data.Batches(val_tokens, batch, seq_len, seed=seed, device=device).next()
    qmodel = quantize_model(model, kernel=kernel)
    logits, qlogits = model(x).float(), qmodel(x).float()
    rel = float((qlogits - logits).norm() / logits.norm())

    def loss(z):
        return float(F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1)))

    worst = 0.0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            qlinear = qmodel.get_submodule(name)
            err = (module.weight.float() - qlinear.weight.float()).abs() / qlinear.scale[:, None]
            worst = max(worst, float(err.max()))
    return {"logits_rel_err": rel, "val_loss": loss(logits), "val_loss_int8": loss(qlogits),
            "max_weight_err_in_steps": worst, "weight_bytes": weight_bytes(model),
            "weight_bytes_int8": weight_bytes(qmodel)}


# ---------------------------------------------------------------------------------- benchmark
def matmul_bytes(M: int, K: int, N: int, *, int8: bool, itemsize: int = 2) -> int:
    """Minimum bytes of y (M x N) = x (M x K) @ W^T: W in `itemsize` bytes, or int8 + fp32 scales."""
    for name, value in (("M", M), ("K", K), ("N", N)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    # BEGIN EXERCISE: the cost model: weights N K (+ 4 N for the fp32 scales) if int8, else itemsize N K;
    #   plus itemsize (M K + M N) for x and y
    # HINT: A minimum-traffic model: every operand read once and the result written once; int8 weights cost
    #   one byte each plus an fp32 scale per output channel.
    # HINT: Weight bytes are N * K + 4 * N for int8, itemsize * N * K otherwise; x (M x K) and y (M x N)
    #   always in itemsize.
    weights = N * K + 4 * N if int8 else itemsize * N * K
    return weights + itemsize * (M * K + M * N)
    # END EXERCISE


def predicted_speedup(M: int, K: int, N: int, *, itemsize: int = 2) -> float:
    """bf16 time / int8 time if both move their bytes at the same rate: the ratio of bytes."""
    return matmul_bytes(M, K, N, int8=False, itemsize=itemsize) / matmul_bytes(M, K, N, int8=True, itemsize=itemsize)


# ------------------------------------------------------------------------- the code behind each entry
# What `int8_matmul` and `int8_matmul_dequant` run: the benchmark (quantization_bench.py) counts its
# lines beside each variant (`Benchmark.sources`).
INT8_MATMUL_CODE = (int8_matmul_kernel, _tile_offsets, _dot, int8_matmul, _run, _check, _launch)
INT8_MATMUL_DEQUANT_CODE = (int8_matmul_dequant_kernel, _tile_offsets, _dot, int8_matmul_dequant, _run, _check,
                            _launch)
