"""Known-wrong forward-only FlashAttention kernels the tests must reject (`python -m course exercises --must-fail`).

In stages: each bug runs against its own stage's tests (1: the online softmax; 2: causal)."""
from classroom.must_fail import Wrong

LESSON = "attention/forward.py"  # the lesson folder's module these bugs are planted in

WRONG = [
    Wrong("accumulator_not_rescaled",
          "the running max rises but the accumulator keeps its old scale: it is not multiplied by exp(m_old - m_new)",
          old="        acc = acc * alpha[:, None]\n",
          new="",
          expect="elements differ", tests=("-k", "test_matches_float64")),
    Wrong("rescale_factor_inverted",
          "l and acc multiplied by exp(m_new - m_old) instead of exp(m_old - m_new): earlier blocks grow",
          old="        alpha = tl.exp(m_i - m_new)              # the rescale of everything summed so far\n",
          new="        alpha = tl.exp(m_new - m_i)\n",
          expect="elements differ|nan", tests=("-k", "test_matches_float64")),
    Wrong("causal_mask_hides_the_diagonal",
          "the causal mask keeps keys j < i only: each query loses its own key (the first row sees nothing)",
          old="            keep = keep & (cols[None, :] <= offs_m[:, None])\n",
          new="            keep = keep & (cols[None, :] < offs_m[:, None])\n",
          expect="elements differ|nan", tests=("-k", "test_matches_float64")),
    Wrong("causal_loop_stops_before_the_diagonal_block",
          "the causal loop ends at the query block's first row, so the diagonal block is never visited",
          old="        hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_k)\n",
          new="        hi = tl.minimum(pid_m * BLOCK_M, seq_k)\n",
          expect="elements differ|nan", tests=("-k", "test_matches_float64")),
]
