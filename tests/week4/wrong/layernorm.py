"""Known-wrong LayerNorm forward kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("padding_lanes_in_the_variance",
          "the row kernel centres x without the mask: every padding lane of the power-of-two block adds "
          "(0 - mean)^2 to the variance (any width that is not a power of two)",
          old="    xc = tl.where(mask, x - mean, 0.0)\n",
          new="    xc = x - mean\n",
          expect="elements differ", tests=("-k", "test_forward_matches_float64 and row")),
    Wrong("looped_mean_over_the_block",
          "the looped forward divides the row's sum by the chunk width BLOCK_N instead of the row's N",
          old="    mean = tl.sum(sums, axis=0) / N\n",
          new="    mean = tl.sum(sums, axis=0) / BLOCK_N\n",
          expect="elements differ", tests=("-k", "test_looped_kernels_match_float64")),
]
