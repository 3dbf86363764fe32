"""Known-wrong fused element-wise kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("bias_by_row",
          "the bias is indexed by the flat element's row (i // n_cols) instead of its column (i % n_cols)",
          old="    b = tl.load(bias_ptr + offsets % n_cols, mask=mask).to(tl.float32)\n",
          new="    b = tl.load(bias_ptr + (offsets // n_cols) % n_cols, mask=mask).to(tl.float32)\n",
          expect="elements differ", tests=("-k", "bias_gelu_matches_torch")),
    Wrong("fp16_arithmetic",
          "x * y + z computed in the inputs' dtype: in fp16 the product is rounded before the add",
          old="    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)\n"
              "    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)\n"
              "    z = tl.load(z_ptr + offsets, mask=mask).to(tl.float32)\n",
          new="    x = tl.load(x_ptr + offsets, mask=mask)\n"
              "    y = tl.load(y_ptr + offsets, mask=mask)\n"
              "    z = tl.load(z_ptr + offsets, mask=mask)\n"
              "    x = (x * y).to(x.dtype).to(tl.float32)\n"
              "    y = 1.0\n",
          expect="elements differ", tests=("-k", "mul_add_matches_torch")),
]
