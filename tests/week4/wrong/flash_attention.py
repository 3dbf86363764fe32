"""Known-wrong FlashAttention kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

LESSON = "attention/flash.py"  # the lesson folder's module these bugs are planted in

WRONG = [
    Wrong("accumulator_not_rescaled",
          "the online softmax raises its running max but forgets to rescale the accumulator by exp(m_old - m_new)",
          old="        acc = acc * alpha[:, None]\n",
          new="",
          expect="elements differ", tests=("-k", "test_forward")),
    Wrong("causal_mask_hides_the_diagonal",
          "the causal mask keeps keys j < i only: each query loses its own key (the first row sees nothing)",
          old="                keep = keep & (cols[None, :] <= offs_m[:, None])\n            s = tl.where(keep, qk * qk_scale",
          new="                keep = keep & (cols[None, :] < offs_m[:, None])\n            s = tl.where(keep, qk * qk_scale",
          expect="elements differ|nan", tests=("-k", "causal and test_forward")),
    Wrong("exp_instead_of_exp2",
          "scores are kept in base 2 (scale * log2 e) but exponentiated with exp: the softmax is too peaked",
          old="            p = tl.exp2(qk * qk_scale - m_new[:, None])\n            alpha = tl.exp2(m_i - m_new)\n",
          new="            p = tl.exp(qk * qk_scale - m_new[:, None])\n            alpha = tl.exp(m_i - m_new)\n",
          expect="elements differ", tests=("-k", "test_forward")),
]
