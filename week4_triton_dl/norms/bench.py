"""What the norms' benchmarks share: their shapes, the op as a model calls it, and the launch sweep.

layernorm_bench.py and rmsnorm_bench.py time their op the same ways, and declare only what differs
(the op's entries, torch's, the parameters it takes, its bytes and FLOPs):
* forward and backward alone, at 128 MB per input (`SIZES`, `size_label`);
* the op as a model calls it: forward + backward through autograd at model shapes
  (`train_benchmark`, `TRAIN_SIZES`), and the host's cost of one forward call at a decode-step
  size (`host_benchmark`, `HOST_SIZES`), where Python, the launcher and autograd set the pace;
* a sweep of launch configurations at one shape, beside torch and the defaults (`sweep`, with
  `sweep_configs`, `timed`, `print_sweep`), and its command line (`sweep_cli`).
"""
from __future__ import annotations

import torch

from course import bench_timing, runtime
from course.bench import Benchmark, bench_dtype, compile_on_first_call
from course.check import random_tensor
from course.sweep import sweep_main
from course.launch import next_power_of_2
from week4_triton_dl.norms.plumbing import pipeline_stages

# bf16, 128 MB per input at every shape (2.5x the H100's L2), 8192 x 8192 last: the headline.
SIZES = [(65536, 1024), (16384, 4096), (8192, 8192)]
SIM_SIZES = [(64, 256)]
# Tokens x width: GPT-2 small (768), 1024-wide models (BERT-large, GPT-2 medium) and Llama 7B
# (4096); 8 x 768 is one decode step of a batch of 8: there the host sets the pace.
TRAIN_SIZES = [(8, 768), (8192, 768), (65536, 768), (16384, 1024), (65536, 1024), (16384, 4096)]
TRAIN_SIM_SIZES = [(4, 64)]
HOST_SIZES = [(8, 768)]


def size_label(size) -> str:
    """'8192x8192': rows x N."""
    return f"{size[0]}x{size[1]}"


# ------------------------------------------------------------------- as a model calls it
def train_inputs(parameters: int):
    """make_inputs for a forward + backward: (x, `parameters` vectors of N, dy), x and the vectors
    requiring gradients, in the benchmark's dtype."""
    def make(size):
        M, N = size
        dtype = bench_dtype()
        x = random_tensor((M, N), dtype, runtime.DEVICE).requires_grad_(True)
        vectors = [random_tensor(N, dtype, runtime.DEVICE).requires_grad_(True) for _ in range(parameters)]
        return (x, *vectors, random_tensor((M, N), dtype, runtime.DEVICE))
    return make


def fwd_bwd(norm):
    """norm(x, *parameters) forward + backward through autograd, as a training step runs it:
    a callable taking (x, *parameters, dy) and returning the gradients of x and every parameter."""
    def step(x, *parameters_and_dy):
        *parameters, dy = parameters_and_dy
        return torch.autograd.grad(norm(x, *parameters), (x, *parameters), dy)
    return step


def train_benchmark(norm: str, op: str, torch_forward, triton_forward, *, parameters: int, bytes, flops,
                    notes: str) -> Benchmark:
    """`<norm>_train_week4`: forward + backward through autograd of torch's op, of torch.compile of
    it and of the course's public entry `triton_forward(x, *parameters)`, at TRAIN_SIZES; also
    replayed from CUDA graphs (rows *_graph: the GPU time alone, as a captured step sees it)."""
    return Benchmark(
        name=f"{norm}_train_week4",
        title=f"{op} forward + backward through autograd, as a model calls it, bf16 (fp32 in simulation), rows x N",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=size_label,
        make_inputs=train_inputs(parameters),
        variants={
            "torch": fwd_bwd(torch_forward),
            "torch_compile": fwd_bwd(compile_on_first_call(torch_forward, dynamic=False)),
            "triton": fwd_bwd(triton_forward),
        },
        gpu_only=("torch_compile",),
        graphed=("torch", "torch_compile", "triton"),
        headline=("triton",),
        bytes=bytes,
        flops=flops,
        notes=notes,
    )


def host_benchmark(norm: str, op: str, make_inputs, torch_forward, triton_forward, launcher, *,
                   notes: str) -> Benchmark:
    """`<norm>_host_week4`: the wall time of one forward call at HOST_SIZES (the GPU work is a
    few microseconds): torch's, the public entry's and the checked launcher's."""
    return Benchmark(
        name=f"{norm}_host_week4",
        title=f"{op} forward: host cost per call at a decode-step size, bf16 (fp32 in simulation)",
        sizes=HOST_SIZES, sim_sizes=HOST_SIZES, size_label=size_label,
        make_inputs=make_inputs,
        variants={"torch": torch_forward, "triton": triton_forward, "triton_launcher": launcher},
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes=notes,
    )


# -------------------------------------------------------------------------------------- sweep
def sweep_configs(N: int, itemsize: int, loaded_per_step: int):
    """(num_warps, rows per step, pipeline stages) worth timing at row width N, on this backend."""
    block_n = next_power_of_2(N)
    for nw in runtime.pick(gpu=(4, 8, 16), sim=(4,)):
        for bm in ((1, 2, 4) if N >= 1024 else (1, 2, 4, 16)):
            if bm * block_n > nw * 32 * 64:
                continue  # > 64 values per thread per tensor: registers spill; not worth a compile
            for stages in (1, 2):
                if pipeline_stages(stages, loaded_per_step * bm * block_n * itemsize) == stages:
                    yield nw, bm, stages


def timed(fn) -> dict:
    """fn()'s timing fields (course.bench.timing_fields): its median ms, by CUDA events on a GPU
    (short budget) or the host clock in simulation, and whether the host paced the GPU's loop."""
    from course import bench

    if runtime.on_gpu():
        return bench.timing_fields(bench.time_gpu(lambda: fn(), [()], warmup_ms=10, rep_ms=60))
    return bench.timing_fields(bench.time_host(lambda: fn(), [()], budget_s=0.05))


def sweep(op: str, x: torch.Tensor, forward, backward, torch_rows: dict, *, forward_kernel: str,
          backward_kernels: tuple = ()) -> None:
    """Time each launch configuration of a norm at x's shape and print a table (for the GPU).

    forward(**launch options) and backward(**launch options) run the op's launchers on x;
    torch_rows: {"forward" or "backward": (label, callable)}, torch's ops, the first row of each
    pass (its "vs torch" reference); backward_kernels: further kernels of the backward, timed
    with their defaults (LayerNorm's "atomic").
    """
    from course import bench

    M, N = x.shape
    sms = runtime.sm_count()
    copy = bench.copy_bandwidth_gbps()
    fwd_bytes, bwd_bytes = 2 * M * N * x.element_size(), 3 * M * N * x.element_size()
    per_sm = runtime.pick(gpu=(1, 2, 4, 8), sim=(1, 2))
    fwd = lambda **kw: timed(lambda: forward(**kw))  # noqa: E731
    bwd = lambda **kw: timed(lambda: backward(**kw))  # noqa: E731

    label, torch_forward = torch_rows["forward"]
    rows = [("forward", label, "-", "-", "-", "-", timed(torch_forward), fwd_bytes),
            ("forward", f"default ({forward_kernel})", "-", "-", "-", "-", fwd(), fwd_bytes)]
    for nw in runtime.pick(gpu=(4, 8, 16), sim=(4,)):
        rows.append(("forward", "row", nw, 1, "-", M, fwd(kernel="row", num_warps=nw), fwd_bytes))
    for nw, bm, stages in sweep_configs(N, x.element_size(), 1):
        for k in per_sm:
            rows.append(("forward", "persistent", nw, bm, stages, k * sms, fwd(
                kernel="persistent", block_m=bm, num_programs=k * sms, num_warps=nw, num_stages=stages), fwd_bytes))
    label, torch_backward = torch_rows["backward"]
    rows += [("backward", label, "-", "-", "-", "-", timed(torch_backward), bwd_bytes),
             ("backward", "default (partial)", "-", "-", "-", "-", bwd(), bwd_bytes)]
    for kernel in backward_kernels:  # one program per row
        rows.append(("backward", kernel, "-", 1, "-", M, bwd(kernel=kernel), bwd_bytes))
    for nw, bm, stages in sweep_configs(N, x.element_size(), 2):
        for k in per_sm:
            rows.append(("backward", "partial", nw, bm, stages, k * sms, bwd(
                block_m=bm, num_partials=k * sms, num_warps=nw, num_stages=stages), bwd_bytes))
    print_sweep(f"{op} {M}x{N} {str(x.dtype).replace('torch.', '')}, {sms} SMs, copy {copy:.0f} GB/s", rows, copy)


def print_sweep(title: str, rows: list, copy_gbps: float) -> None:
    print(f"\n{title}{'' if runtime.on_gpu() else ' (SIMULATION: times measure Python)'}")
    print("| pass | kernel | num_warps | rows/step | stages | programs (= partial rows) | ms | GB/s | % of copy | vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    reference = {}
    for pass_, kernel, nw, bm, stages, programs, timing, nbytes in rows:
        ms = timing["ms"]
        reference.setdefault(pass_, ms)  # the first row of each pass is torch's
        gbps = nbytes / (ms * 1e-3) / 1e9
        print(f"| {pass_} | {kernel} | {nw} | {bm} | {stages} | {programs} | {bench_timing.ms_cell(timing)} | {gbps:.0f} | "
              f"{100 * gbps / copy_gbps:.1f} | {reference[pass_] / ms:.2f}x |")
    print(bench_timing.footnote([row[6] for row in rows]), end="")


def sweep_cli(module_name: str, run, doc: str | None = None) -> int:
    """The norms' command line (course.sweep.sweep_main): `python -m MODULE --sweep [--shape MxN]
    [--dtype D]` calls run(M, N, dtype)."""
    def options(parser):
        parser.add_argument("--shape", default=None, help="MxN (default 8192x8192 on a GPU, 64x256 simulated)")
        parser.add_argument("--dtype", default=None, choices=("bfloat16", "float16", "float32"))

    def sweep(shape, dtype):
        M, N = (int(v) for v in (shape or runtime.pick(gpu="8192x8192", sim="64x256")).lower().split("x"))
        run(M, N, getattr(torch, dtype or runtime.pick(gpu="bfloat16", sim="float32")))

    return sweep_main(sweep, doc=doc, help="time launch configurations",
                      options=options, prog=f"python -m {module_name}")
