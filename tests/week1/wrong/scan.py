"""Known-wrong prefix sums the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("hillis_steele_exclusive_not_shifted",
          "exclusive=True loads x[t] instead of x[t - 1]: the exclusive scan comes out inclusive",
          old="        src = t - 1 if exclusive else t\n",
          new="        src = t\n",
          expect="elements differ", tests=("-k", "test_integer_valued_floats_are_exact and scan_numba_hillis_steele "
                                                "and exclusive")),
    Wrong("blelloch_inclusive_without_own_element",
          "the down-sweep leaves the exclusive scan in the tree and the inclusive result forgets to add "
          "each element once more",
          old="            out[base + a] = tree[padded(a)] if exclusive else tree[padded(a)] + xa\n",
          new="            out[base + a] = tree[padded(a)]\n",
          expect="elements differ", tests=("-k", "test_integer_valued_floats_are_exact and scan_numba_blelloch "
                                                "and inclusive")),
]
