"""Known-wrong cross-entropy launches the tests must reject (`python -m course exercises --must-fail`).
The kernels' own known-wrong versions: cross_entropy_kernels.py beside this file."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("empty_mean_is_zero",
          "the mean over no rows is written as 0: torch gives 0 / 0 = NaN, and a training loop should see it",
          old='        return out.fill_(math.nan if reduction == "mean" else 0.0), (count.zero_() if need_count else None)\n',
          new="        return out.fill_(0.0), (count.zero_() if need_count else None)\n",
          expect="differ", tests=("-k", "test_ignore_index_all_ignored_and_empty")),
    Wrong("rows_assumed_dense",
          "the one-launch forward takes the row stride to be the row length: rows of a wider buffer are read "
          "from the wrong place",
          old="    row_stride, smoothing, mean = logits.stride(0), label_smoothing > 0, reduction == \"mean\"\n",
          new="    row_stride, smoothing, mean = n_cols, label_smoothing > 0, reduction == \"mean\"\n",
          expect="differ", tests=("-k", "test_non_dense_logits_and_targets")),
]
