"""Compile FlashAttention's tile configs in parallel processes, before a benchmark or a training run.

The autotuner compiles its configs one after another in one process (~2-4 s each on the H100
machine's CPU); with three kernels x ~10 configs x (causal, non-causal) x head dims that is
minutes of a run spent in ptxas. `warm_cache` compiles them spread over CPU cores, filling
Triton's on-disk cache, so the autotuner afterwards only times. The shapes must be the ones the
run will use: Triton specializes integer arguments on divisibility by 16, so the cache key must
match. Used by tools/warm_attention_cache.py (the benchmarks' shapes) and capstone/fsdp.py's
`warm` (the model's).
"""
from __future__ import annotations

import multiprocessing as mp


def config_sets(head_dim: int) -> int:
    """How many config sets (one forward, one dK/dV and one dQ config each) cover every tile config
    of the three fused kernels at this head dim."""
    from week4_triton_dl.attention.backward import BWD_KV_CONFIGS, BWD_Q_CONFIGS
    from week4_triton_dl.attention.flash import FWD_CONFIGS
    from week4_triton_dl.attention.plans import configs_for

    return max(len(configs_for(c, head_dim)) for c in (FWD_CONFIGS, BWD_KV_CONFIGS, BWD_Q_CONFIGS))


def compile_config_set(task):
    """One worker's job, task = ((B, H, S, D), causal, index): run the forward and the backward once
    with the index-th config of each kernel (modulo its list), bf16, on the GPU. Returns the task."""
    (batch, heads, seq, head_dim), causal, index = task
    import torch

    from course import runtime
    from course.check import random_tensor
    from week4_triton_dl.attention.backward import BWD_KV_CONFIGS, BWD_Q_CONFIGS, flash_attention_backward
    from week4_triton_dl.attention.flash import FWD_CONFIGS
    from week4_triton_dl.attention.op import flash_attention_forward
    from week4_triton_dl.attention.plans import configs_for

    def nth(configs):
        configs = configs_for(configs, head_dim)
        return configs[index % len(configs)]

    q, k, v, do = (random_tensor((batch, heads, seq, head_dim), torch.bfloat16, runtime.DEVICE) for _ in range(4))
    out, lse = flash_attention_forward(q, k, v, causal, config=nth(FWD_CONFIGS), rung="flash_blocked")
    flash_attention_backward(do, q, k, v, out, lse, causal, kv_config=nth(BWD_KV_CONFIGS), q_config=nth(BWD_Q_CONFIGS))
    torch.cuda.synchronize()
    return task


def warm_cache(shapes, procs: int = 8, progress=None) -> int:
    """Compile every tile config for `shapes`, a list of ((B, H, S, D), causal), in `procs` spawned
    processes; `progress(done, total)` after each config set. Returns the number of config sets."""
    tasks = [(tuple(shape), bool(causal), index) for shape, causal in shapes
             for index in range(config_sets(shape[3]))]
    if not tasks:
        return 0
    with mp.get_context("spawn").Pool(max(1, min(procs, len(tasks)))) as pool:
        for done, _ in enumerate(pool.imap_unordered(compile_config_set, tasks), 1):
            if progress is not None:
                progress(done, len(tasks))
    return len(tasks)
