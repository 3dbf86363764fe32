"""How week 3's matmul kernels are launched: configs, operand layout, launchers (the kernels: matmul.py).

Everything here is plain Python around the kernels of matmul.py, which it is handed as a `Kernels`
record (so an exercise stub's launchers run the stub's kernels, and fp8 its own autotuners):

* the autotuners' config spaces (`AUTOTUNE_CONFIGS`, `PERSISTENT_CONFIGS`), their keys, and the
  pruner that drops configs the GPU's shared memory cannot hold (`shared_memory_bytes`);
* the operands' layout: the input checks (`check_args`), 16-byte row alignment (`row_align`,
  `rows_16_byte_aligned`) and the padded copies that buy vector loads where a stride defeats them
  (`padded_copy`, `pad_for_vector_loads`; matmul.py's docstring says why);
* the launchers of the three kernels (`run_kernel`): the pointer kernels (tiled, persistent) and the
  TMA kernel with its tensor descriptors and its C store (`stores_c_through_tma`).

Which kernel and which config a call gets is matmul_dispatch.py's rule.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from course import runtime, validate, versions
from course.gpu import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from week3_triton_kernels.matmul_basic import DTYPES, check_operands

ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
# Triton specialises an integer argument divisible by 16 (and a pointer aligned to 16 bytes):
# only then can it prove that a row starts on a 16-byte boundary and use vector loads.
ALIGN = 16


class Kernels(NamedTuple):
    """The kernels a launch may run: each @triton.jit kernel (launched with a given config) and its
    autotuned wrapper (launched without one). matmul.py's `KERNELS`; fp8 swaps in its autotuners."""
    tiled: object
    tiled_autotuned: object
    persistent: object
    persistent_autotuned: object
    tma: object
    tma_autotuned: object


# ---------------------------------------------------------------------------- configs
def tile_config(bm, bn, bk, stages, warps, group_m=8, **extra):
    """A triton.Config of a tiled matmul: BLOCK_M x BLOCK_N x BLOCK_K tiles, GROUP_M, stages, warps."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, **extra},
                         num_stages=stages, num_warps=warps)


# Small spaces (each config costs a compile and a timing run on first use of a shape). The
# large tiles feed the H100's wgmma well; the small ones win when M or N is small.
AUTOTUNE_CONFIGS = [
    tile_config(128, 256, 64, 3, 8),
    tile_config(256, 128, 64, 3, 8),
    tile_config(128, 128, 64, 4, 8),
    tile_config(128, 128, 64, 4, 4),
    tile_config(64, 128, 64, 4, 4),
]
PERSISTENT_CONFIGS = [
    tile_config(128, 256, 64, 3, 8, FLATTEN=True),
    tile_config(128, 256, 64, 4, 8, FLATTEN=True),
    tile_config(128, 128, 64, 4, 8, FLATTEN=True),
    tile_config(128, 128, 64, 4, 4, FLATTEN=True),
    tile_config(64, 128, 64, 4, 4, FLATTEN=True),
]
SMALL_PROBLEM = 512 * 512  # C this small: tiles of 64 x 128 already give every SM work


def shared_memory_bytes(config, itemsize: int, c_itemsize: int = 0) -> int:
    """Bytes of shared memory a config takes: its pipeline buffers, stages x (BLOCK_M + BLOCK_N) x
    BLOCK_K x itemsize, plus, when C leaves through a TMA store (c_itemsize: C's element size, 0
    for ordinary stores), the staging buffer of one C tile (half a tile with EPILOGUE_SUBTILE)."""
    kw = config.kwargs
    staging = kw["BLOCK_M"] * kw["BLOCK_N"] * c_itemsize // (2 if kw.get("EPILOGUE_SUBTILE") else 1)
    return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * itemsize + staging


def _prune_configs(configs, named_args, **kwargs):
    # Each config is a compile (seconds). Drop those whose buffers cannot fit the GPU's shared
    # memory (a T4 has 64 KB per block, an H100 227 KB); for a small C, where big tiles would leave
    # most SMs idle anyway, time only the smallest tile.
    operand = named_args.get("a_ptr", named_args.get("a_desc"))
    itemsize = (operand.base if isinstance(operand, TensorDescriptor) else operand).element_size()
    c_desc = named_args.get("c_desc")  # the TMA kernel storing through a descriptor: count its staging
    c_itemsize = c_desc.base.element_size() if c_desc is not None else 0
    size = lambda c: shared_memory_bytes(c, itemsize, c_itemsize)  # noqa: E731
    limit = runtime.shared_memory_per_block()
    fitting = [c for c in configs if size(c) <= limit]
    fitting = fitting or [min(configs, key=size)]
    if named_args["M"] * named_args["N"] <= SMALL_PROBLEM:
        return [min(fitting, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return fitting


def c_block_shape(bm: int, bn: int, epilogue_subtile: bool = False) -> list[int]:
    """The block shape of C's descriptor: the tile, or half of it along N with EPILOGUE_SUBTILE."""
    return [bm, bn // 2 if epilogue_subtile else bn]


def _tma_block_shapes(nargs):
    # A descriptor's block shape is part of its type: set it from the config being launched.
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_KMAJOR"] else [bk, bn]
    if nargs.get("c_desc") is not None:
        nargs["c_desc"].block_shape = c_block_shape(bm, bn, nargs.get("EPILOGUE_SUBTILE", False))


def with_tma_block_shapes(configs):
    """The configs, each setting the TMA descriptors' block shapes before its launch (a pre_hook)."""
    return [triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=c.num_stages,
                          pre_hook=_tma_block_shapes) for c in configs]


# The autotuners' keys: a best config is kept per value of each. ROW_ALIGN (the pointer kernels'
# promise of aligned rows) and C_TMA (the TMA kernel's store, whose staging buffer takes shared
# memory) change which configs fit and win.
KEY = ["M", "N", "K", "HAS_BIAS", "HAS_SCALE", "ACTIVATION", "FP8_PRECISE"]
POINTER_KEY = KEY + ["ROW_ALIGN"]
TMA_KEY = KEY + ["B_KMAJOR", "C_TMA"]
PRUNE = {"early_config_prune": _prune_configs}
# The interpreter cannot time configs (no device clock); it runs this small one instead.
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


# ------------------------------------------------------------------------- input handling
def check_args(a, b, bias, activation, out, *, dtypes=DTYPES, out_dtype=None):
    """(M, N, K, out) after `check_operands` (a, b, out: matmul_basic) and the epilogue's arguments:
    `activation` one of ACTIVATIONS, `bias` N elements in out's dtype."""
    M, N, K, out = check_operands(a, b, out, dtypes=dtypes, out_dtype=out_dtype)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    if bias is not None:
        validate.tensor(bias, "bias", dtypes=(out.dtype,), ndim=1)
        if bias.shape[0] != N:
            raise ValueError(f"bias has {bias.shape[0]} elements; expected N = {N} (one per column of c)")
    return M, N, K, out


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _aligned(t: torch.Tensor, row_major: bool) -> bool:
    """Rows (row_major) or columns start on 16-element boundaries and the base is 16-byte aligned."""
    inner, outer = (1, 0) if row_major else (0, 1)
    return (t.stride(inner) == 1 and (t.stride(outer) % ALIGN == 0 or t.shape[outer] == 1)
            and t.data_ptr() % 16 == 0)


def rows_16_byte_aligned(t: torch.Tensor) -> bool:
    """t (2-D) is row-major and every row starts on a 16-byte boundary: columns contiguous, the
    row stride a multiple of 16 bytes (8 fp16 elements) and the base 16-byte aligned. That is what
    the TMA engine needs of a tensor it reads or writes, and what lets the pointer kernels move
    16-byte vectors along the rows once told (ROW_ALIGN)."""
    return t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0


def row_align(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> int:
    """The pointer kernels' ROW_ALIGN: 16 bytes in elements (8 for fp16) when a, b and out, of one
    dtype, all have 16-byte aligned rows (`rows_16_byte_aligned`) and K and N are multiples of it
    (no row ends inside a vector); else 1, nothing promised. Such operands need no padded copy:
    at 5000 x 3000 x 4000 B's row stride of 3000 elements is 6000 bytes, a multiple of 16."""
    step = 16 // a.element_size()
    same_dtype = a.dtype == b.dtype == out.dtype
    aligned = same_dtype and all(rows_16_byte_aligned(t) for t in (a, b, out))
    return step if aligned and a.shape[1] % step == 0 and b.shape[1] % step == 0 else 1


def padded_copy(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """t (r x c) copied into a row-major buffer with row stride round_up(cols, 16), rows >= r.

    Returns the (rows x cols) view. Rows r..rows and columns c..cols are zeros (padding K with
    zeros adds nothing to a dot product); the columns past `cols` in each row are not touched.
    """
    r, c = t.shape
    buffer = t.new_empty((rows, _round_up(cols, ALIGN)))
    view = buffer[:, :cols]
    view[:r, :c].copy_(t)
    if rows > r:
        view[r:].zero_()
    if cols > c:
        view[:r, c:].zero_()
    return view


def pad_for_vector_loads(a: torch.Tensor, b: torch.Tensor, k_major_b: bool = False):
    """(a, b, K, a_rows, b_cols) arranged so the pointer kernels can use 16-byte loads.

    A's loads are vectors along its contiguous dimension, B's likewise; that needs aligned
    strides and, along the vectorised dimension, an extent that is a multiple of 16 (K for the
    masked K loop, M or N for the % wrap-around). Operands that fail are copied (`padded_copy`):
    K is padded with zeros in both, B's columns to a multiple of 16 (b_cols: computed, never
    stored). Operands that pass are used in place, whatever their layout. `k_major_b` (fp8)
    makes a copied B column-major, the layout fp8 tensor cores read.
    """
    M, K = a.shape
    N = b.shape[1]
    k_pad = _round_up(K, ALIGN)
    a_rows, b_cols = M, N
    a_ok = k_pad == K and (_aligned(a, row_major=True) or (_aligned(a, row_major=False) and M % ALIGN == 0))
    if not a_ok:
        a = padded_copy(a, M, k_pad)
    b_ok = k_pad == K and (_aligned(b, row_major=False) or
                           (not k_major_b and _aligned(b, row_major=True) and N % ALIGN == 0))
    if not b_ok and k_major_b:
        b = padded_copy(b.t(), N, k_pad).t()  # (k_pad, N), column-major
    elif not b_ok:
        b_cols = _round_up(N, ALIGN)
        b = padded_copy(b, k_pad, b_cols)
    return a, b, k_pad, a_rows, b_cols


def _programs(config: dict, M: int, N: int) -> tuple[int, int]:
    """(NUM_PROGRAMS, grid size) of a persistent launch with `config` (its PER_SM popped): PER_SM
    programs per SM (1: one wave, 2: two co-resident programs per SM hide each other's
    latencies), or PER_SM = 0: one program per tile (the persistent loop runs once)."""
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
    per_sm = config.pop("PER_SM", 1)
    step = tiles if per_sm == 0 else per_sm * runtime.sm_count()
    return step, min(step, tiles)


def _launch_pointer(kind, kernels, a, b, bias, activation, out, scales, fp8_precise, pad_strides, config):
    M, K = a.shape
    N = b.shape[1]
    # fp8 wants B column-major (pad_for_vector_loads makes it so): no ROW_ALIGN promise there.
    align = row_align(a, b, out) if scales is None else 1
    if pad_strides and align == 1:  # aligned rows need no copy: the kernel is told instead
        a, b, K, a_rows, b_cols = pad_for_vector_loads(a, b, k_major_b=scales is not None)
    else:
        a_rows, b_cols = M, N
    a_scale, b_scale = scales if scales is not None else (out, out)
    args = (a, b, out, bias if bias is not None else out, a_scale, b_scale, M, N, K, a_rows, b_cols,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1))
    meta = dict(HAS_BIAS=bias is not None, HAS_SCALE=scales is not None,
                ACTIVATION=ACTIVATIONS[activation], FP8_PRECISE=fp8_precise, ROW_ALIGN=align)
    tiles = lambda m: triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"])  # noqa: E731
    if kind == "tiled":
        kernel = kernels.tiled_autotuned if config is None else kernels.tiled
        kernel[lambda m: (tiles(m),)](*args, **meta, **(config or {}))
        return out
    if config is None:
        sms = runtime.sm_count()
        kernels.persistent_autotuned[lambda m: (min(sms, tiles(m)),)](*args, **meta, NUM_PROGRAMS=sms)
        return out
    config = dict(config)
    step, grid = _programs(config, M, N)
    kernels.persistent[(grid,)](*args, **meta, NUM_PROGRAMS=step, **config)
    return out


def _tma_operands(a, b):
    """A row-major and B either way round, both with 16-byte aligned strides (TMA's rule)."""
    M, K = a.shape
    N = b.shape[1]
    if not rows_16_byte_aligned(a):
        a = padded_copy(a, M, K)
    if rows_16_byte_aligned(b.t()):  # K-major B (b = w.t()): the descriptor walks w, (N, K)
        return a, b.t(), True
    if a.element_size() == 1:
        # fp8 wgmma reads B only K-major from shared memory: make that layout once here.
        return a, padded_copy(b.t(), N, K), True
    if not rows_16_byte_aligned(b):
        b = padded_copy(b, K, N)
    return a, b, False


def stores_c_through_tma(out: torch.Tensor, itemsize: int, config: dict | None = None) -> bool:
    """Whether the TMA kernel writes `out` through a TMA store: wherever TMA allows it (out
    row-major with 16-byte aligned rows, each row a whole number of 16-byte pieces) and, for a given config (operands of `itemsize` bytes),
    where the C staging buffer still fits in shared memory beside the pipeline (the autotuner's
    pruner counts it the same way). Anywhere else: the masked stores of the pointer kernels."""
    if not rows_16_byte_aligned(out):
        return False
    if out.shape[1] * out.element_size() % 16:
        # Measured on the H100 (Triton 3.6, tools/probe_tma_store_edge.py): a TMA store into a column
        # slice 53 fp16 wide wrote columns 53-55 too, up to the next 16-byte boundary, where the
        # neighbouring columns of the buffer live. So C's width must end on a 16-byte boundary.
        return False
    if config is None:
        return True
    as_config = triton.Config(config, num_stages=config.get("num_stages", 3))
    return shared_memory_bytes(as_config, itemsize, out.element_size()) <= runtime.shared_memory_per_block()


def _launch_tma(kernels, a, b, bias, activation, out, scales, fp8_precise, config):
    M, K = a.shape
    N = b.shape[1]
    a, b_stored, b_kmajor = _tma_operands(a, b)
    if config is None and not runtime.on_gpu():
        config = dict(SIM_CONFIG, FLATTEN=True)
    config = dict(config) if config is not None else None
    bm, bn, bk = ((config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]) if config is not None
                  else (64, 64, 64))  # placeholder block shapes: the tuner's pre_hook sets them
    subtile = config is not None and config.get("EPILOGUE_SUBTILE", False)
    c_tma = stores_c_through_tma(out, a.element_size(), config)
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b_stored, [bn, bk] if b_kmajor else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, c_block_shape(bm, bn, subtile)) if c_tma else None
    versions.refuse_unsimulated_descriptors("matmul_tma", "use matmul_persistent, a GPU, or Triton >= 3.6",
                                            *(d.strides for d in (a_desc, b_desc, c_desc) if d is not None))
    a_scale, b_scale = scales if scales is not None else (out, out)
    args = (a_desc, b_desc, c_desc, out, bias if bias is not None else out, a_scale, b_scale, M, N, K,
            out.stride(0), out.stride(1))
    meta = dict(HAS_BIAS=bias is not None, HAS_SCALE=scales is not None, ACTIVATION=ACTIVATIONS[activation],
                FP8_PRECISE=fp8_precise, B_KMAJOR=b_kmajor, C_TMA=c_tma)
    if config is None:
        sms = runtime.sm_count()
        grid = lambda m: (min(sms, triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"])),)  # noqa: E731
        kernels.tma_autotuned[grid](*args, **meta, NUM_PROGRAMS=sms)
    else:
        step, grid = _programs(config, M, N)
        kernels.tma[(grid,)](*args, **meta, NUM_PROGRAMS=step, **config)
    return out


def run_kernel(kind, kernels: Kernels, a, b, bias, activation, out, M, N, K, *, scales=None, fp8_precise=False,
               pad_strides=True, config=None):
    """Launch `kind` ("tiled", "persistent", "tma": the rung) of `kernels` on checked operands;
    config=None: autotuned (GPU) or SIM_CONFIG, else that config (a dict of the kernel's
    meta-parameters: the sweep's). `scales` (a_scale, b_scale tensors) and `fp8_precise` serve fp8
    (whose autotuners `kernels` carries: matmul_fp8.py)."""
    runtime.require_bf16_tensor_cores(a.dtype, "the Triton matmul (tl.dot)")  # the sweep comes here directly
    if scales is not None:  # fp8 operands: refused before any launch where there are no fp8 tensor cores
        runtime.require_capability((8, 9), "fp8 matmul (fp8 tensor cores)",
                                   "use float16 or bfloat16 operands (matmul)")
    if M == 0 or N == 0:
        return out
    if K == 0:
        # An empty sum is 0; the epilogue still applies. Not worth a kernel.
        acc = torch.zeros((M, N), dtype=torch.float32, device=a.device)
        out.copy_(epilogue_torch(acc, bias, activation))
        return out
    if kind == "tma":
        return _launch_tma(kernels, a, b, bias, activation, out, scales, fp8_precise, config)
    if config is None and not runtime.on_gpu():
        config = dict(SIM_CONFIG, **({"FLATTEN": True} if kind == "persistent" else {}))
    return _launch_pointer(kind, kernels, a, b, bias, activation, out, scales, fp8_precise, pad_strides, config)



# ------------------------------------------------------------------------ the epilogue's reference
# -------------------------------------------------------------------------------- references
def epilogue_torch(acc, bias, activation):
    """bias and activation applied to acc in torch (acc's dtype): the epilogue's reference."""
    if bias is not None:
        acc = acc + bias.to(acc.dtype)
    if activation == "relu":
        acc = torch.relu(acc)
    elif activation in ("gelu", "gelu_tanh"):
        acc = torch.nn.functional.gelu(acc, approximate="tanh" if activation == "gelu_tanh" else "none")
    elif activation == "silu":
        acc = torch.nn.functional.silu(acc)
    return acc

