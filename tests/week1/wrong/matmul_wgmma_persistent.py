"""Known-wrong pieces of the persistent wgmma rung the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("last_group_not_shortened",
          "persistent_tile takes every group as group_m rows tall: when the row tiles are not a multiple of "
          "group_m, the last group's tiles are split by the wrong row count and some tiles of C are never "
          "computed while others are computed twice",
          old="    rows = min(tiles_m - first_m, group_m)\n",
          new="    rows = group_m\n",
          expect="assert", tests=("-k", "test_tile_order_is_a_permutation")),
    Wrong("row_major_inside_the_group",
          "persistent_tile walks a group row by row (column = in_group % tiles_n): the tiles in flight then "
          "span whole rows of C, and with a ragged last group the order is no longer a permutation",
          old="    return first_m + in_group % rows, in_group // rows\n",
          new="    return first_m + in_group // tiles_n, in_group % tiles_n\n",
          expect="assert", tests=("-k", "test_tile_order_is_a_permutation")),
]
