"""Known-wrong pieces of the NF4 data type the tests must reject (`python -m course exercises --must-fail`)."""
from course.exercises import Wrong

WRONG = [
    Wrong("table_not_normalized",
          "the derived code table is left in units of standard deviations: its ends are not -1 and 1",
          old="    return levels / levels.max()\n",
          new="    return levels\n",
          expect="derivation|elements differ", tests=("-k", "derivation")),
]
