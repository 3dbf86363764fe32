"""Known-wrong dropouts the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("not_inverted",
          "kept elements are not scaled by 1 / (1 - p): the expectation shrinks by 1 - p",
          old="    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)  # p = 1 drops everything; no 1/0\n",
          new="    scale = 1.0\n",
          expect="scaled|expectation|elements differ", tests=("-k", "scaled_and_dropped or expectation")),
    Wrong("keeps_with_probability_p",
          "keep where r < p: p becomes the keep probability instead of the drop probability",
          old="    keep = r >= p  # P(keep) = 1 - p exactly for a uniform r\n",
          new="    keep = r < p\n",
          expect="keep_probability|elements differ", tests=("-k", "keep_probability or scaled_and_dropped")),
]
