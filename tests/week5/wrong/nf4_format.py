"""Known-wrong pieces of the NF4 data type the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("table_not_normalized",
          "the derived code table is left in units of standard deviations: its ends are not -1 and 1",
          old="    return levels / levels.max()\n",
          new="    return levels\n",
          expect="derivation|elements differ", tests=("-k", "derivation")),
    Wrong("scales_not_centred",
          "the fp32 scales are quantized to 8 bits without subtracting their mean: all positive, they use half "
          "the grid, and the step no longer matches the paper's",
          old="    centred = absmax - mean\n",
          new="    centred = absmax\n",
          expect="step|differ|excess", tests=("-k", "test_double_quantized_scales_are_within_half_a_step")),
]
