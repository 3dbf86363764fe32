"""Debugging Triton kernels: the runnable companion of debugging_triton.md.

    python -m week3_triton_kernels.debug_demo bugs          two real bugs, caught (any machine)
    python -m week3_triton_kernels.debug_demo crash         the unmasked store, uncaught (interpreter; may crash)
    python -m week3_triton_kernels.debug_demo print         print() inside a kernel (interpreter)
    python -m week3_triton_kernels.debug_demo pdb           breakpoint() inside a kernel (interpreter)
    python -m week3_triton_kernels.debug_demo static        tl.static_print / tl.static_assert
    python -m week3_triton_kernels.debug_demo compile [SM]  compile for a GPU you do not have (default sm_90):
                                                            layouts, shared memory, registers, vector loads
    python -m week3_triton_kernels.debug_demo launch        GPU: what a launch returns (k.n_regs, k.asm, ...)
    python -m week3_triton_kernels.debug_demo device_print  GPU: tl.device_print from a tiny grid
    TRITON_DEBUG=1 python -m week3_triton_kernels.debug_demo device_assert   GPU: a failing tl.device_assert
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \\
        python -m week3_triton_kernels.debug_demo oob       GPU: the missing tail mask, caught by the sanitizer

Without a GPU (or with COURSE_BACKEND=sim) kernels run in the Triton interpreter, where print and
pdb work inside them. The buggy kernels below are deliberately wrong; never copy them.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import torch

from course import runtime  # chooses the GPU or the interpreter; each demo imports triton when it runs


# -------------------------------------------------------------------- deliberately buggy kernels
def _buggy_kernels():
    """Defined on demand, so `compile` can decorate its kernels outside the interpreter."""
    import triton
    import triton.language as tl

    @triton.jit
    def copy2d_ignores_strides_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr,
                                      BLOCK_C: tl.constexpr):
        # BUG: addresses x as if it were row-major and contiguous (row * n_cols + col).
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        offs = rows[:, None] * n_cols + cols[None, :]
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def copy_no_tail_mask_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
        # BUG: no mask: the last program reads and writes past the end when BLOCK_SIZE does not divide n.
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))

    return copy2d_ignores_strides_kernel, copy_no_tail_mask_kernel


def demo_bugs() -> None:
    import triton
    from course.check import assert_close, poisoned

    ignores_strides, no_tail_mask = _buggy_kernels()
    print(f"backend: {runtime.BACKEND}, triton {triton.__version__}\n")

    print("1) A 2-D copy that ignores x's strides, given the transposed view a.t():")
    a = torch.arange(6 * 4, dtype=torch.float32, device=runtime.DEVICE).reshape(6, 4)
    x = a.t()  # shape (4, 6), strides (1, 4): not row-major
    out = poisoned(x.shape, x.dtype, runtime.DEVICE)
    ignores_strides[(1, 1)](x, out, 4, 6, BLOCK_R=8, BLOCK_C=8)
    try:
        assert_close(out, x.contiguous(), name="copy of a.t()")
    except AssertionError as error:
        print(error)
    print("   The kernel read x[i, j] at offset 6 i + j, where it lives at i + 4 j: only the elements\n"
          "   where the two agree are right. Fix: pass x.stride(0), x.stride(1) and use them.\n")

    print("2) A copy without a tail mask: n = 1000, BLOCK_SIZE = 256, four programs.")
    n = 1000
    src = torch.arange(n + 24, dtype=torch.float32, device=runtime.DEVICE)[:n]
    buffer = poisoned(n + 24, torch.float32, runtime.DEVICE)  # out, then a poisoned canary region
    out = buffer[:n]
    no_tail_mask[(triton.cdiv(n, 256),)](src, out, n, BLOCK_SIZE=256)
    try:
        assert_close(out, src, name="out")
        print("   out matches: poisoning out alone cannot see this bug.")
    except AssertionError as error:
        print(error)
    canary = buffer[n:]
    touched = int((~torch.isnan(canary)).sum())
    print(f"   canary after out: {touched} of {canary.numel()} poisoned elements overwritten -> "
          f"{canary[:6].tolist()} ...")
    print("   The last program wrote 24 elements past the end of out (and read 24 past src).\n"
          "   Fix: mask = offs < n on the load and the store.")


def demo_crash() -> None:
    import triton

    _need_interpreter("this demo (an unmasked store into CPU memory)")
    _, no_tail_mask = _buggy_kernels()
    x = torch.arange(1000, dtype=torch.float32)
    out = torch.empty(1000)  # no canary: the last program writes 24 floats into whatever follows
    no_tail_mask[(triton.cdiv(1000, 256),)](x, out, 1000, BLOCK_SIZE=256)
    print("equal:", torch.equal(out, x), flush=True)


# --------------------------------------------------------------------------- interpreter tools
def _need_interpreter(what: str) -> None:
    if runtime.on_gpu():
        sys.exit(f"{what} inside a kernel needs the interpreter: run with COURSE_BACKEND=sim")


def demo_print() -> None:
    import triton
    import triton.language as tl

    _need_interpreter("print()")

    @triton.jit
    def strided_copy_with_print(x_ptr, out_ptr, n, stride, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < n
        if pid == 1:  # an ordinary Python `if` and `print` in the interpreter: values are NumPy arrays
            print("pid", pid, "offs", offs, "mask", mask, "addresses", offs * stride)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask), mask=mask)

    base = torch.arange(40, dtype=torch.float32)
    x = base[::4]  # 10 elements, stride 4
    out = torch.empty(10)
    strided_copy_with_print[(2,)](x, out, 10, x.stride(0), BLOCK_SIZE=8)
    print("out =", out.tolist())


def demo_pdb() -> None:
    import triton
    import triton.language as tl

    _need_interpreter("pdb")

    @triton.jit
    def copy2d_with_breakpoint(x_ptr, out_ptr, n_rows, n_cols, stride_r, stride_c,
                               BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        src = rows[:, None] * stride_r + cols[None, :] * stride_c
        breakpoint()  # stops once per program: `p src`, `p mask`, `c` to go on
        tl.store(out_ptr + rows[:, None] * n_cols + cols[None, :], tl.load(x_ptr + src, mask=mask), mask=mask)

    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = a.t()
    out = torch.empty(4, 3)
    copy2d_with_breakpoint[(1, 1)](x, out, 4, 3, x.stride(0), x.stride(1), BLOCK_R=4, BLOCK_C=4)
    print("out == a.t():", torch.equal(out, x.contiguous()))


def demo_static() -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def tiled_copy_checked(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr, VEC: tl.constexpr):
        tl.static_print("compiling with BLOCK_SIZE =", BLOCK_SIZE, "VEC =", VEC)
        tl.static_assert(BLOCK_SIZE % VEC == 0, "BLOCK_SIZE must be a multiple of VEC")
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.arange(64, dtype=torch.float32, device=runtime.DEVICE)
    out = torch.empty_like(x)
    tiled_copy_checked[(1,)](x, out, 64, BLOCK_SIZE=64, VEC=4)
    print("ok:", torch.equal(out, x))
    try:
        tiled_copy_checked[(1,)](x, out, 64, BLOCK_SIZE=64, VEC=48)
    except Exception as error:  # CompilationError on a GPU, InterpreterError in the interpreter
        print(f"{type(error).__name__}: {str(error).strip().splitlines()[-1]}")


# ---------------------------------------------------------------------- what the compiler made
def _cuobjdump_registers(cubin: bytes) -> str:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        except OSError as error:
            return f"(cuobjdump not runnable: {error})"
    match = re.search(r"REG:(\d+)", text)
    return f"{match.group(1)} registers per thread (cuobjdump)" if match else text.strip()[-200:]


def demo_compile(arch: int = 90) -> None:
    # Kernels decorated while TRITON_INTERPRET is set are interpreter functions: clear it
    # before access_patterns is imported, so its kernels are real JIT functions.
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from week3_triton_kernels import access_patterns as ap

    target = GPUTarget("cuda", arch, 32)
    print(f"triton {triton.__version__}, compiling for sm_{arch} (no GPU needed)\n")
    base = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "stride_r": "i32",
            "stride_c": "i32", "out_stride_r": "i32", "BLOCK_R": "constexpr", "BLOCK_C": "constexpr"}
    aligned = [["tt.divisibility", 16]]
    cases = [
        # What a launch on a row-major 4096 x 4096 fp32 input specialises: stride_c == 1 becomes
        # the constant 1, and every integer divisible by 16 is marked so (alignment).
        ("row-major x (x.stride(1) == 1), 4096 columns", "stride_c", "stride_r", True),
        ("transposed x (x.stride(0) == 1), 4096 columns", "stride_r", "stride_c", True),
        ("row-major x, 4097 columns (not a multiple of 16)", "stride_c", "stride_r", False),
    ]
    for label, unit, other, divisible in cases:
        names = ap.copy2d_tiled_kernel.arg_names
        signature = dict(base, **{unit: "constexpr"})
        marked = ("x_ptr", "out_ptr", "n_rows") + ((other, "n_cols", "out_stride_r") if divisible else ())
        attrs = {(names.index(a),): aligned for a in marked}
        source = ASTSource(ap.copy2d_tiled_kernel, signature, constexprs={unit: 1, "BLOCK_R": 64, "BLOCK_C": 64},
                           attrs=attrs)
        k = triton.compile(source, target=target, options={"num_warps": 4})
        ttgir, ptx = k.asm["ttgir"], k.asm["ptx"]
        layouts = re.findall(r"^(#blocked\d*) = #ttg\.blocked<\{(.*?)\}>", ttgir, flags=re.M)
        print(f"copy2d_tiled_kernel, {label}:")
        for name, body in layouts:
            print(f"  {name}: {body}")
        print(f"  ttg.convert_layout ops: {ttgir.count('ttg.convert_layout')}, "
              f"shared memory: {k.metadata.shared} bytes, {_cuobjdump_registers(k.asm['cubin'])}")
        loads = re.findall(r"ld\.global[\w.]*", ptx)
        stores = re.findall(r"st\.global[\w.]*", ptx)
        print(f"  PTX: {len(loads)} x {sorted(set(loads))}, {len(stores)} x {sorted(set(stores))}\n")


# ------------------------------------------------------------------------------- GPU only
def _need_gpu(what: str) -> None:
    if not runtime.on_gpu():
        sys.exit(f"{what} needs a real NVIDIA GPU (this machine runs the interpreter)")


def demo_launch() -> None:
    import triton

    from week3_triton_kernels import access_patterns as ap

    _need_gpu("a compiled launch")
    x = torch.randn(4096, 4096, device="cuda")
    out = torch.empty_like(x)
    for label, view in (("row-major x", x), ("transposed x", x.t())):
        grid = (triton.cdiv(4096, ap.TILE[0]) * triton.cdiv(4096, ap.TILE[1]),)
        k = ap.copy2d_tiled_kernel[grid](view, out, 4096, 4096, view.stride(0), view.stride(1), out.stride(0),
                                         BLOCK_R=ap.TILE[0], BLOCK_C=ap.TILE[1], num_warps=ap.TILE_WARPS)
        print(f"copy2d_tiled_kernel, {label}: n_regs={k.n_regs} n_spills={k.n_spills} "
              f"num_warps={k.metadata.num_warps} num_stages={k.metadata.num_stages} shared={k.metadata.shared}")
        print("  asm keys:", sorted(k.asm))
        for line in k.asm["ttgir"].splitlines():
            if line.startswith("#blocked") or "convert_layout" in line:
                print("  ", line.strip()[:150])
    for stride in (1, 4):
        base = torch.randn(1 << 22, device="cuda")
        view = base[::stride]
        dst = torch.empty(view.numel(), device="cuda")
        k = ap.strided_copy_kernel[(triton.cdiv(view.numel(), 1024),)](view, dst, view.numel(), stride,
                                                                       BLOCK_SIZE=1024)
        vec = sorted(set(re.findall(r"ld\.global[\w.]*", k.asm["ptx"])))
        print(f"strided_copy_kernel, stride={stride}: n_regs={k.n_regs}, PTX loads {vec}")
    a, b = torch.randn(2048, 2048, device="cuda").half(), torch.randn(2048, 2048, device="cuda").half()
    same = torch.equal(ap.copy2d_descriptor(a.t()), a.t().contiguous())
    print("copy2d_descriptor(a.t()) == a.t().contiguous():", same)
    try:
        from week3_triton_kernels import matmul as mm

        mm.matmul(a, b)
        tuned = getattr(mm, "matmul_kernel_autotuned", None)
        print("matmul autotuner's choice for 2048^3 fp16:", getattr(tuned, "best_config", "n/a"))
    except Exception as error:  # another lesson's API; the demo goes on without it
        print("matmul best_config: not available:", error)


def demo_device_print() -> None:
    import triton
    import triton.language as tl

    _need_gpu("tl.device_print")

    @triton.jit
    def copy_with_device_print(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        tl.device_print("offs", offs)  # one line per thread and element: keep the grid tiny
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.arange(6, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    copy_with_device_print[(2,)](x, out, 6, BLOCK_SIZE=4, num_warps=1)
    torch.cuda.synchronize()
    print("out =", out.tolist())


def demo_device_assert() -> None:
    import triton
    import triton.language as tl

    _need_gpu("tl.device_assert")
    if os.environ.get("TRITON_DEBUG") != "1":
        sys.exit("run with TRITON_DEBUG=1: without it tl.device_assert compiles to nothing")

    @triton.jit
    def gather(x_ptr, idx_ptr, out_ptr, n, size, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < n
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
        tl.device_assert((idx >= 0) & (idx < size), "gather index out of range")
        tl.store(out_ptr + offs, tl.load(x_ptr + idx, mask=mask), mask=mask)

    x = torch.arange(8, dtype=torch.float32, device="cuda")
    idx = torch.tensor([0, 3, 9, 1], dtype=torch.int32, device="cuda")  # 9 is out of range
    out = torch.empty(4, device="cuda")
    gather[(1,)](x, idx, out, 4, 8, BLOCK_SIZE=4)
    torch.cuda.synchronize()  # the assertion surfaces here, and the CUDA context is unusable after it
    print("not reached")


def demo_oob() -> None:
    import triton

    _need_gpu("the sanitizer demo")
    _, no_tail_mask = _buggy_kernels()
    n = 1100  # 4400 bytes; 2 programs of 1024 write 8192: past the 4608 bytes cudaMalloc rounds up to
    x = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    no_tail_mask[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
    torch.cuda.synchronize()
    print("finished: without compute-sanitizer (and with torch's caching allocator) nothing complains")


DEMOS = {"bugs": demo_bugs, "crash": demo_crash, "print": demo_print, "pdb": demo_pdb, "static": demo_static,
         "compile": demo_compile, "launch": demo_launch, "device_print": demo_device_print, "device_assert": demo_device_assert,
         "oob": demo_oob}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in DEMOS:
        print(__doc__)
        return 0 if not argv else 2
    if argv[0] == "compile":
        demo_compile(int(argv[1].removeprefix("sm_")) if len(argv) > 1 else 90)
    else:
        DEMOS[argv[0]]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
