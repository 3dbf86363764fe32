"""Compile every FlashAttention autotune config in parallel processes before benchmarking.

The benchmarks' shapes: the long-sequence benchmarks' S = 1024 (H = 16) at each head dim, causal
and not, and the model shapes of `attention_train_week4` (GPT-2 small: H = 12, causal). The
compiling is week4_triton_dl.attention's `warm_cache` (attention/warm.py says why it pays).

    python tools/warm_attention_cache.py --head-dims 128 64 --procs 8
"""
import argparse


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--no-model-shapes", action="store_true", help="skip attention_train_week4's shapes")
    args = parser.parse_args()
    from week4_triton_dl.attention import bench, warm_cache

    shapes = [((bench.batch_for(1024), bench.HEADS, 1024, d), causal) for d in args.head_dims for causal in (False, True)]
    if not args.no_model_shapes:
        shapes += [(size, True) for size in bench.TRAIN_SIZES]
    warm_cache(shapes, args.procs, lambda done, total: print(f"\rcompiled {done}/{total} config sets", end="", flush=True))
    print()


if __name__ == "__main__":
    main()
