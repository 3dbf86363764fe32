"""Known-wrong stage-2 sums the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("partial_rows_unmasked",
          "stage 2 masks the columns but not the partial rows: the last BLOCK_P tile reads rows past P",
          old="        mask = (rows < P)[:, None] & col_mask[None, :]\n",
          new="        mask = col_mask[None, :]\n",
          expect="out-of-bounds|elements differ", tests=("-k", "test_column_sums")),
    Wrong("columns_unmasked_on_the_store",
          "stage 2 stores every column of its tile: on the last tile, the columns past N land outside out",
          old="    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=col_mask)\n",
          new="    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))\n",
          expect="out-of-bounds", tests=("-k", "test_column_sums")),
]
