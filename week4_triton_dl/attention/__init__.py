"""The attention lesson: unfused to fused, forward to backward, pointer loads to TMA (lessons 09 and 10).

    naive.py     three kernels: scores written to HBM, softmax, then P @ V (notes/attention_naive.md)
    forward.py   the online softmax in one kernel, forward only: read it first
    op.py        the op a model calls: checks, autograd, the registered custom op; calls the dispatch
    dispatch.py  which forward and tile the op runs, for this GPU, dtype, head dim and mask; runs it
    flash.py     the flash_blocked forward: the fused kernel a model runs, and its launcher
    tma.py       the flash_tma forward: the same kernel with tiles moved by the Hopper TMA engine
    backward.py  the backward (dK/dV and dQ kernels, split or atomic)
    plans.py     what the fused kernels share: inputs, key ranges, tiles, launch plans (named tuples)
    padding_keys.py  the one check of key_lengths (padding keys), for every rung: Triton's and the Hopper CUDA C
    bench.py     benchmarks, the ladder (`python -m course rung attention`), the sweeps
    warm.py      warm_cache: compile every tile config in parallel processes before a run

The public API is below; `flash_attention(q, k, v, causal=..., rung=None, tile=None)` is the op.
"""
from week4_triton_dl.attention.backward import flash_attention_backward
from week4_triton_dl.attention.dispatch import RUNGS
from week4_triton_dl.attention.forward import flash_attention_forward_only
from week4_triton_dl.attention.naive import attention_naive
from week4_triton_dl.attention.op import flash_attention, flash_attention_forward
from week4_triton_dl.attention.plans import HEAD_DIMS
from week4_triton_dl.attention.tma import flash_attention_tma_forward
from week4_triton_dl.attention.warm import warm_cache


__all__ = ["RUNGS", "HEAD_DIMS", "attention_naive", "flash_attention", "flash_attention_backward",
           "flash_attention_forward", "flash_attention_forward_only", "flash_attention_tma_forward", "warm_cache"]
