"""Not an exercise: fp8 is the ladder's last rung, and what is new in it lives in the kernels of
matmul.py (the HAS_SCALE epilogue in `_epilogue`, FP8_PRECISE's promotion in `_dot`), which
are holes of exercises/matmul.py; this file re-exports week3_triton_kernels.matmul_fp8 (its
configs, the launcher `matmul_fp8`, `quantize_fp8` and the float64 references), so
`--impl=exercises` tests the course's own launcher here. To practise anyway, replace this
re-export with your own module of the same public names and run `pytest
tests/week3/test_matmul_fp8.py --impl=exercises`.
"""
from week3_triton_kernels.matmul_fp8 import *  # noqa: F401,F403
