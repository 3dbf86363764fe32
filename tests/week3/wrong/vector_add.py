"""Known-wrong Triton vector adds the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("tail_unmasked",
          "no mask: the last program reads and writes past the end whenever n is not a multiple of BLOCK_SIZE",
          old="    a = tl.load(a_ptr + offsets, mask=mask)\n    b = tl.load(b_ptr + offsets, mask=mask)\n"
              "    tl.store(out_ptr + offsets, a + b, mask=mask)\n",
          new="    a = tl.load(a_ptr + offsets)\n    b = tl.load(b_ptr + offsets)\n"
              "    tl.store(out_ptr + offsets, a + b)\n",
          expect="out-of-bounds|elements differ", tests=("-k", "matches_torch")),
    Wrong("grid_rounded_down",
          "the grid is n // BLOCK_SIZE programs: the last partial block is never computed",
          old="    grid = (triton.cdiv(n, BLOCK_SIZE),)\n",
          new="    grid = (max(1, n // BLOCK_SIZE),)\n",
          expect="elements differ|never written", tests=("-k", "matches_torch")),
    Wrong("int32_offsets",
          "offsets computed in int32: pid * BLOCK_SIZE wraps past 2^31 elements",
          old="    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n",
          new="    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n",
          expect="2_to_the_31|elements differ|out-of-bounds", tests=("-k", "past_2_to_the_31")),
]
