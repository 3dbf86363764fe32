"""Known-wrong FlashAttention backward kernels the tests must reject (`python -m course exercises --must-fail`)."""
from course.exercises import Wrong

WRONG = [
    Wrong("dq_without_the_delta_term",
          "dS = P * dP in the dQ kernel: the softmax Jacobian's row term D = rowsum(dO * O) is left out",
          old="        ds = p * (dp - delta[:, None])\n",
          new="        ds = p * dp\n",
          expect="elements differ", tests=("-k", "test_launcher_gradients_match_float64")),
    Wrong("recomputed_p_not_masked",
          "the dK/dV kernel recomputes P = exp(s - lse) but forgets the causal mask: future queries feed dK and dV",
          old="            p_t = tl.where(keep, p_t, 0.0)\n",
          new="",
          expect="elements differ", tests=("-k", "causal and test_launcher_gradients_match_float64")),
]
