"""Known-wrong pieces of the split-K rung the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("ranges_not_recounted",
          "split keeps the ranges asked for after rounding the k tiles per range up: 9 k tiles asked for 4 ranges "
          "become 4 ranges of 3, the fourth empty (its units would store partial sums of nothing, and the kernel "
          "computes 3 from k_per_split: the launcher and the kernel disagree on the workspace)",
          old="    return -(-k_tiles // per), per\n",
          new="    return splits, per\n",
          expect="assert", tests=("-k", "test_every_range_holds_k_tiles")),
    Wrong("sum_drops_the_last_range",
          "the sum adds ranges 1 .. splits - 2: the last range's partial sums never reach C, which comes out too "
          "small by the last K / splits of every dot product",
          old="        for (int s = 1; s < splits; ++s) {\n",
          new="        for (int s = 1; s < splits - 1; ++s) {\n",
          lesson="kernels/matmul_wgmma_split_k.cu", gpu=True, expect="out of bounds|differ|assert",
          tests=("-k", "test_matches_float32_reference and (s2 or s3)")),
]
