"""Known-wrong histograms the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("out_of_range_values_counted",
          "the global kernel counts every value: no `0 <= value < bins` check, so values past the last "
          "bin index past the counters (and negative int32 values wrap to the end)",
          old="        if value >= 0 and value < counts.size:  # out-of-range values are not counted\n"
              "            cuda.atomic.add(counts, value, 1)\n",
          new="        cuda.atomic.add(counts, value, 1)\n",
          expect="out of bounds|index|elements differ", tests=("-k", "test_out_of_range_values_are_not_counted")),
    Wrong("dynamic_shared_memory_in_elements",
          "the launch gives the dynamic shared memory as `bins` (a count of counters) instead of bytes "
          "(4 * bins): the block's histogram has room for only a quarter of the bins",
          old="        histogram_shared_kernel[_grid(x.numel(), THREADS, BLOCKS_PER_SM), THREADS, 0, 4 * bins](\n",
          new="        histogram_shared_kernel[_grid(x.numel(), THREADS, BLOCKS_PER_SM), THREADS, 0, bins](\n",
          expect="out of bounds|index|elements differ",
          tests=("-k", "test_matches_bincount and histogram_numba_shared")),
]
