"""Known-wrong profile readings the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("case_sensitive_names",
          "kernel names are matched as they come (Triton's, cuBLAS's and aten's mix cases): many land in 'other'",
          old="    lowered = name.lower()\n",
          new="    lowered = name\n",
          expect="classify", tests=("-k", "classify")),
    Wrong("roof_above_both_ceilings",
          "the roof at an intensity is the larger of the two ceilings instead of the smaller",
          old="        roof = min(peak_tflops, copy_gbps * intensity / 1e3)  # TFLOP/s the hardware allows here\n",
          new="        roof = max(peak_tflops, copy_gbps * intensity / 1e3)\n",
          expect="roofline", tests=("-k", "roofline_placement")),
]
