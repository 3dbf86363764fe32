"""Known-wrong softmax kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("max_not_subtracted",
          "exp(x) without subtracting the row's max first: large scores overflow to inf, inf / inf = NaN",
          old="    z = x - tl.max(x, axis=0)\n",
          new="    z = x\n",
          expect="overflow|elements differ|nan", tests=("-k", "large_inputs_do_not_overflow")),
    Wrong("online_sum_not_rescaled",
          "the online softmax raises its running max but does not rescale the running sum by exp(m - m_new)",
          old="        d = d * tl.exp(m - shift) + tl.exp(x - shift)\n",
          new="        d = d + tl.exp(x - shift)\n",
          expect="elements differ", tests=("-k", "online_softmax_over_many_chunks")),
    Wrong("padding_loaded_as_zero",
          "the columns past n_cols are loaded as 0, not -inf: exp(0) = 1 joins every row's sum",
          old="    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float(\"inf\")).to(tl.float32)\n",
          new="    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)\n",
          expect="elements differ", tests=("-k", "one_block_kernels")),
]
