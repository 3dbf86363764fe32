"""Known-wrong autotuning setups the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("atomics_not_reset_between_trials",
          "the row-sum tuner does not zero out between timed runs: every trial adds its sums into out again",
          old="""        reset_to_zero=["out_ptr"] if reset_to_zero else None,\n""",
          new="""        reset_to_zero=None,\n""",
          expect="elements differ|reset", tests=("-k", "row_sum")),
    Wrong("in_place_update_not_restored",
          "the axpy tuner lets each timed trial update y in place: y ends with a * x added once per trial",
          old="""                           restore_value=["y_ptr"] if restore_value else None,\n""",
          new="""                           restore_value=None,\n""",
          expect="elements differ|restore", tests=("-k", "restore_value")),
    Wrong("partial_sums_stored_not_added",
          "each program stores its partial sum into out[row] instead of atomic_add: the last part wins",
          old="    tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0))\n",
          new="    tl.store(out_ptr + row, tl.sum(acc, axis=0))\n",
          expect="elements differ", tests=("-k", "every_split")),
]
