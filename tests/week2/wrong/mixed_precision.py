"""Known-wrong precision probes the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("mantissa_without_the_implicit_bit",
          "significant bits read as -log2(eps): the implicit leading 1 is not counted (23, 7 and 10)",
          old="torch.tensor(info.eps)).item()) + 1,",
          new="torch.tensor(info.eps)).item()),",
          expect="format_facts", tests=("-k", "format_facts")),
    Wrong("accumulated_in_float32",
          "the running sum is kept in float32 and rounded at the end: the bf16 stall never shows",
          old="    total = torch.zeros((), dtype=dtype)\n",
          new="    total = torch.zeros((), dtype=torch.float32)\n",
          expect="stalls", tests=("-k", "accumulator_stalls")),
]
