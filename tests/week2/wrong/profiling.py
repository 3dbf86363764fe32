"""Known-wrong profile readers the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("overlaps_counted_twice",
          "busy time as the sum of the intervals: kernels of concurrent streams overlap and count twice",
          old="        if start > cur_end:\n",
          new="        if True:\n",
          expect="busy_fraction", tests=("-k", "busy_fraction")),
    Wrong("steps_not_labelled",
          "the profiled steps are not wrapped in record_function(label): the trace has no span per step",
          old="            with record_function(label):\n                step()\n",
          new="            step()\n",
          expect="profile_of_a_training_step", tests=("-k", "profile_of_a_training_step")),
]
