"""Known-wrong sparse kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("row_end_unmasked",
          "CSR-vector's last step reads a whole BLOCK of nonzeros: past the row's end it adds the next row's",
          old="        idx = k + lanes\n        live = idx < end\n",
          new="        idx = k + lanes\n        live = idx < end + BLOCK\n",
          expect="out-of-bounds|elements differ", tests=("-k", "vector")),
    Wrong("segments_overwrite",
          "the split kernel stores each segment's sum into y[row] instead of adding it: the last segment wins",
          old="    tl.atomic_add(y_ptr + row, tl.sum(acc, axis=0))\n",
          new="    tl.store(y_ptr + row, tl.sum(acc, axis=0))\n",
          expect="elements differ", tests=("-k", "bucketed or split or long")),
]
