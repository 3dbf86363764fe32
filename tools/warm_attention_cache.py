"""Compile every FlashAttention autotune config in parallel processes before benchmarking.

The autotuner compiles its configs one after another in one process (~2-4 s each on the H100
machine's CPU); with three kernels x ~10 configs x (causal, non-causal) x head dims that is
minutes of a benchmark run spent in ptxas. Compiling them here, spread over CPU cores, fills
Triton's on-disk cache, so the autotuner afterwards only times. Same shapes as the benchmarks
(Triton specializes integer arguments on divisibility by 16, so the cache key must match):
the long-sequence benchmarks' S = 1024 (H = 16) at each head dim, causal and not, and the model
shapes of `attention_train_week4` (GPT-2 small: H = 12, causal).

    python tools/warm_attention_cache.py --head-dims 128 64 --procs 8
"""
import argparse
import itertools
import multiprocessing as mp


def _warm(task):
    (batch, heads, seq, head_dim), causal, index = task
    import torch

    from course import runtime
    from course.check import random_tensor
    from week4_triton_dl import flash_attention as fa
    from week4_triton_dl import flash_attention_backward as fab
    from week4_triton_dl.flash_attention_plans import configs_for

    def nth(configs):
        configs = configs_for(configs, head_dim)
        return configs[index % len(configs)]

    q, k, v, do = (random_tensor((batch, heads, seq, head_dim), torch.bfloat16, runtime.DEVICE) for _ in range(4))
    out, lse = fa.flash_attention_forward(q, k, v, causal, config=nth(fa.FWD_CONFIGS))
    fab.flash_attention_backward(do, q, k, v, out, lse, causal,
                                 kv_config=nth(fab.BWD_KV_CONFIGS), q_config=nth(fab.BWD_Q_CONFIGS))
    torch.cuda.synchronize()
    return task


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--no-model-shapes", action="store_true", help="skip attention_train_week4's shapes")
    args = parser.parse_args()
    from week4_triton_dl import flash_attention_bench as bench
    from week4_triton_dl.flash_attention import FWD_CONFIGS
    from week4_triton_dl.flash_attention_backward import BWD_KV_CONFIGS, BWD_Q_CONFIGS
    from week4_triton_dl.flash_attention_plans import configs_for
    most = max(len(configs_for(c, d)) for d in args.head_dims + [s[3] for s in bench.TRAIN_SIZES]
               for c in (FWD_CONFIGS, BWD_KV_CONFIGS, BWD_Q_CONFIGS))
    shapes = [((bench._batch(1024), bench.HEADS, 1024, d), causal) for d in args.head_dims for causal in (False, True)]
    if not args.no_model_shapes:
        shapes += [(size, True) for size in bench.TRAIN_SIZES]
    tasks = [(shape, causal, index) for (shape, causal), index in itertools.product(shapes, range(most))]
    with mp.get_context("spawn").Pool(args.procs) as pool:
        for done, _ in enumerate(pool.imap_unordered(_warm, tasks), 1):
            print(f"\rcompiled {done}/{len(tasks)} config sets", end="", flush=True)
    print()


if __name__ == "__main__":
    main()
