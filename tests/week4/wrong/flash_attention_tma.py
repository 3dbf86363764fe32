"""Known-wrong TMA FlashAttention forwards the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

LESSON = "attention/tma.py"  # the lesson folder's module these bugs are planted in

WRONG = [
    Wrong("padding_values_not_zeroed",
          "V rows of padding keys inside S are used as loaded: TMA fills zeros only past S, so NaN in them "
          "reaches every output through 0 * NaN",
          old="            v = tl.where((start_n + offs_n)[:, None] < n_keys, v, 0.0)\n",
          new="            v = v  # (the padding rows left as loaded)\n",
          expect="elements differ|nan", tests=("-k", "test_key_padding_with_garbage_and_empty_rows")),
    Wrong("tile_at_the_wrong_head",
          "K's descriptor is placed with the flat program index bh as the head: from the second batch on, "
          "queries attend to another (batch, head)'s keys",
          old="    k_desc = head_descriptor(k_ptr, b, h, stride_kb, stride_kh, stride_ks, seq_k, HEAD_DIM, BLOCK_N)\n",
          new="    k_desc = head_descriptor(k_ptr, b, bh, stride_kb, stride_kh, stride_ks, seq_k, HEAD_DIM, BLOCK_N)\n",
          expect="elements differ|out-of-bounds", tests=("-k", "test_explicit_scale_and_batches")),
    Wrong("lse_in_base_2",
          "the log-sum-exp is left in base 2 (m + log2 l, no * ln 2): the output is right, the backward's "
          "statistic is not",
          old="    lse = tl.where(empty, -float(\"inf\"), (m_i + tl.log2(l_safe)) * _LN2)\n",
          new="    lse = tl.where(empty, -float(\"inf\"), m_i + tl.log2(l_safe))\n",
          expect="lse", tests=("-k", "test_matches_float64")),
]
