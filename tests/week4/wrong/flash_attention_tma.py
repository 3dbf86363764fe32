"""Known-wrong TMA FlashAttention forwards the tests must reject (`python -m course exercises --must-fail`)."""
from course.exercises import Wrong

WRONG = [
    Wrong("padding_values_not_zeroed",
          "V rows of padding keys inside S are used as loaded: TMA fills zeros only past S, so NaN in them "
          "reaches every output through 0 * NaN",
          old="            v = tl.where((start_n + offs_n)[:, None] < n_keys, v, 0.0)\n",
          new="            v = v  # (the padding rows left as loaded)\n",
          expect="elements differ|nan", tests=("-k", "test_key_padding_with_garbage_and_empty_rows")),
    Wrong("tile_at_the_wrong_head",
          "the K/V tile is taken at head b instead of (b, h): every head but the first attends to another head's keys",
          old="        k = k_desc.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)\n",
          new="        k = k_desc.load([b, 0, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)\n",
          expect="elements differ", tests=("-k", "test_explicit_scale_and_batches or test_matches_float64")),
    Wrong("lse_in_base_2",
          "the log-sum-exp is left in base 2 (m + log2 l, no * ln 2): the output is right, the backward's "
          "statistic is not",
          old="    lse = tl.where(empty, -float(\"inf\"), (m_i + tl.log2(l_safe)) * _LN2)\n",
          new="    lse = tl.where(empty, -float(\"inf\"), m_i + tl.log2(l_safe))\n",
          expect="lse", tests=("-k", "test_matches_float64")),
]
