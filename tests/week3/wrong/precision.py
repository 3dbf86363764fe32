"""Known-wrong precision models the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("tf32_truncated",
          "tf32 by truncation (clearing the 13 low bits) instead of rounding to nearest, ties to even",
          old="    rounded = ((bits + 0xFFF + lowest_kept) & -8192).view(torch.float32)  # -8192 = ~0x1FFF\n",
          new="    rounded = (bits & -8192).view(torch.float32)\n",
          expect="nearest_even|elements differ", tests=("-k", "round_to_tf32")),
    Wrong("wide_accumulator",
          "the running sum is accumulated in fp32 and only rounded at the end: no step loses its small addends",
          old="        acc = acc + values[..., k].to(acc_dtype)  # the sum of two acc_dtype values is rounded to it\n",
          new="        pass\n    acc = values.double().sum(-1).to(acc_dtype)  # summed wide, rounded once\n",
          expect="small_addends|assert", tests=("-k", "bf16_accumulator")),
]
