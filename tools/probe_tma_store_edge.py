"""Probe: which columns past C's bounds a TMA-store matmul writes on the GPU (a failing test's case)."""
import torch
from course import runtime  # noqa: F401
from course.check import poisoned, random_tensor
from week3_triton_kernels import matmul as mm

torch.manual_seed(0)
M, N, K = 19, 56, 40
for dtype in (torch.float16,):
    a = random_tensor((M, K), dtype, "cuda")
    b = random_tensor((K, N), dtype, "cuda")
    bias = random_tensor(N, dtype, "cuda")
    for label, config in (("autotuned", None), ("fixed 64x64", dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3, FLATTEN=True)),
                          ("fixed sub", dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3, FLATTEN=True, EPILOGUE_SUBTILE=True))):
        for cols in (N, N - 3):
            buf = poisoned((M, N + 8), dtype, "cuda")
            out = buf[:, :cols]
            c_tma = mm.stores_c_through_tma(out, 2, config)
            M_, N_, K_, out2 = mm.check_args(a, b[:, :cols], bias[:cols], "silu", out)
            print(label, cols, "out is out2:", out2 is out, "c_tma", c_tma)
            mm.run_kernel("tma", a, b[:, :cols], bias[:cols], "silu", out2, M_, N_, K_, config=config)
            torch.cuda.synchronize()
            written = (~buf.isnan()).any(0).nonzero().flatten().tolist()
            print("   columns written:", written[0], "..", written[-1], "count", len(written))
