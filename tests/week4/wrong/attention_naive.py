"""Known-wrong unfused attention kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

LESSON = "attention/naive.py"  # the lesson folder's module these bugs are planted in

WRONG = [
    Wrong("causal_mask_hides_the_diagonal",
          "the causal mask keeps j < i: a query no longer sees its own key (the first row sees nothing: NaN)",
          old="        keep = keep & (offs_n[None, :] <= offs_m[:, None])\n",
          new="        keep = keep & (offs_n[None, :] < offs_m[:, None])\n",
          expect="elements differ|nan", tests=("-k", "causal")),
    Wrong("scale_forgotten",
          "the scores are not multiplied by sm_scale = 1/sqrt(D): the softmax comes out far too peaked",
          old="    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale\n",
          new="    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)\n",
          expect="elements differ"),
]
