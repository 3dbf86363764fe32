"""Exercise: matmul on the tensor cores with WMMA. Same names as week1_cuda_python/matmul_tensor_cores.py.

Check your work with `pytest tests/week1/test_matmul_tensor_cores.py --impl=exercises` (the
kernel tests need an NVIDIA GPU; the shape and input-check tests run anywhere). Each function
below that raises NotImplementedError is yours; delete that line when you write it. The CUDA C
side is `exercises/kernels/matmul_tc.cu`: its entry points are written, their bodies are not.

Rules of the house: validate a (M x K) and b (K x N) first (2-D, fp16 or bf16, the same dtype,
contiguous, same device, inner dimensions equal; course.validate has the sentences), refuse bf16
on a GPU below compute capability 8.0 (`_capability()`), allocate or check `out` (M x N, the
inputs' dtype or float32), return early when M or N is 0, write zeros when K is 0, and pad the
operands with zeros to the tile multiples the kernel assumes (32-byte aligned: wmma's rule).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from course import runtime  # noqa: F401  first: chooses the GPU or simulation
from course import interop, validate  # noqa: F401
from course.check import poisoned, random_tensor

CUDA_SOURCE = Path(__file__).parent / "kernels" / "matmul_tc.cu"  # your CUDA C file
DTYPES = (torch.float16, torch.bfloat16)
FRAGMENT = 16
ALIGNMENT = 32  # bytes
TYPE_SUFFIX = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


@dataclass(frozen=True)
class TileConfig:
    """Block tile BM x BN x BK, warp tile WM x WN, pipeline depth (given: match kernels/matmul_tc.cu)."""
    bm: int = 128
    bn: int = 128
    bk: int = 32
    wm: int = 64
    wn: int = 64
    stages: int = 2

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def stage_bytes(self, itemsize: int = 2) -> int:
        return (self.bm * (self.bk + 8) + self.bk * (self.bn + 8)) * itemsize

    def shared_bytes(self, rung: str) -> int:
        return self.stage_bytes() * (self.stages if rung == "cp_async" else 1)

    def problems(self) -> list[str]:
        found = []
        if any(v % FRAGMENT for v in (self.bm, self.bn, self.bk, self.wm, self.wn)):
            found.append("every tile size must be a multiple of 16")
        elif self.bm % self.wm or self.bn % self.wn:
            found.append("the warp tile must divide the block tile")
        elif (self.bm * self.bk // 8) % self.threads or (self.bk * self.bn // 8) % self.threads:
            found.append("the 16-byte copies of a tile must split evenly over the threads")
        if self.stages < 2:
            found.append("the cp.async pipeline needs at least 2 stages")
        if self.threads > 1024:
            found.append("more than 1024 threads per block")
        if self.shared_bytes("cp_async") > 48 * 1024:
            found.append(f"{self.shared_bytes('cp_async')} bytes of static shared memory (max 48 KB)")
        return found


DEFAULT_TILES = TileConfig()
NAIVE_BLOCK = (32, 32)  # rows x columns of C per block of the naive rung: 2 x 2 warps
NAIVE_THREADS = 128


@dataclass(frozen=True)
class Rung:
    kernel: str
    what: str

    def tiles(self, config: TileConfig = DEFAULT_TILES) -> tuple[int, int, int]:
        """Multiples (M, N, K) the operands are padded to."""
        if self.kernel == "wmma_naive":
            return FRAGMENT, FRAGMENT, FRAGMENT
        return config.bm, config.bn, config.bk


RUNGS = {
    "naive": Rung("wmma_naive", "one warp per 16x16 tile of C, fragments loaded from global memory"),
    "shared": Rung("wmma_shared", "block tiles in skewed shared memory, 64x64 warp tiles of 4x4 fragments"),
    "cp_async": Rung("wmma_cp_async", "as wmma_shared, with a cp.async pipeline (double buffering)"),
}
WMMA_LAUNCHERS = tuple(f"matmul_wmma_{rung}" for rung in RUNGS)


def kernel_name(rung: str, in_dtype: torch.dtype, out_dtype: torch.dtype) -> str:
    """Given: the extern "C" kernel name, e.g. wmma_shared_f16_f32."""
    return f"{RUNGS[rung].kernel}_{TYPE_SUFFIX[in_dtype]}_{TYPE_SUFFIX[out_dtype]}"


def padded_shape(rung, m, n, k, tiles=DEFAULT_TILES):
    """(Mp, Np, Kp): M, N, K rounded up to RUNGS[rung].tiles(tiles)."""
    raise NotImplementedError("not implemented yet: padded_shape (week1 exercise)")


def padded(t, rows, cols):
    """`t` itself if already rows x cols and ALIGNMENT-byte aligned (t.data_ptr()), else a zero-padded copy."""
    raise NotImplementedError("not implemented yet: padded (week1 exercise)")


def launch_geometry(rung, m, n, tiles=DEFAULT_TILES):
    """(grid, block): grid = (blocks along N, blocks along M); block = (threads, 1, 1)."""
    raise NotImplementedError("not implemented yet: launch_geometry (week1 exercise)")


def _capability():
    """Given: the GPU's compute capability, or None in simulation."""
    return torch.cuda.get_device_capability(runtime.DEVICE) if runtime.on_gpu() else None


def matmul_wmma_naive(a, b, out=None, *, out_dtype=None):
    """Launch `wmma_naive_<in>_<out>`: interop.cuda_module(CUDA_SOURCE).get_function(kernel_name(...)),
    .prepare("PPPiiiii") for (A, B, C, M, N, K padded, lda, ldb)."""
    raise NotImplementedError("not implemented yet: matmul_wmma_naive (week1 exercise)")


def matmul_wmma_shared(a, b, out=None, *, out_dtype=None):
    raise NotImplementedError("not implemented yet: matmul_wmma_shared (week1 exercise)")


def matmul_wmma_cp_async(a, b, out=None, *, out_dtype=None):
    raise NotImplementedError("not implemented yet: matmul_wmma_cp_async (week1 exercise)")


def matmul_reference(a, b, out_dtype=None):
    """Given: the exact product (float64) rounded once to `out_dtype` (default: the inputs' dtype)."""
    return (a.double() @ b.double()).to(out_dtype or a.dtype)


def _sanitizer_case(rung, in_dtype, out_dtype):
    a = random_tensor((70, 40), in_dtype, runtime.DEVICE)
    b = random_tensor((40, 50), in_dtype, runtime.DEVICE)
    launcher = globals()[f"matmul_wmma_{rung}"]
    launcher(a, b, out=poisoned((70, 50), out_dtype, runtime.DEVICE))
    torch.cuda.synchronize()


SANITIZER_CASES: dict[str, Callable[[], None]] = {
    kernel_name(rung, in_dtype, out_dtype): functools.partial(_sanitizer_case, rung, in_dtype, out_dtype)
    for rung in RUNGS for in_dtype in DTYPES for out_dtype in (in_dtype, torch.float32)
}

SASS_OPCODES = ("HMMA", "HGMMA", "LDSM", "LDGSTS", "LDS", "LDG", "LD", "STS", "STG", "BAR")
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def sass_opcode_counts(sass: str) -> dict[str, dict[str, int]]:
    """Given: {kernel: {opcode family: count}} from `cuobjdump -sass` text."""
    counts: dict[str, dict[str, int]] = {}
    current = None
    for line in sass.splitlines():
        if "Function :" in line:
            current = line.split("Function :")[1].strip()
            counts[current] = dict.fromkeys(SASS_OPCODES, 0)
            continue
        match = _SASS_LINE.search(line)
        if current is not None and match and match.group(1) in counts[current]:
            counts[current][match.group(1)] += 1
    return counts
