"""Where the Hopper PTX wrappers live, for every build that includes them.

`kernels/hopper_ptx.cuh` holds the sm_90a instructions (mbarriers, TMA, wgmma, setmaxnreg, named barriers)
as C++ functions, one copy for the course: week 1's wgmma GEMMs and week 4's attention kernels include it.
Every nvcc command and load_inline build that compiles one of them adds `HOPPER_PTX_INCLUDE`, so a kernel
and its exercise stub find the header alike. A module of its own, with no import-time work, so that a
later week can name the header without importing week 1's lessons (which ask the GPU what it is).
"""
from pathlib import Path

HOPPER_PTX = Path(__file__).resolve().parent / "kernels" / "hopper_ptx.cuh"  # the PTX wrappers of every sm_90a kernel
HOPPER_PTX_INCLUDE = ("-I", str(HOPPER_PTX.parent))  # in all their nvcc commands: a kernel and its stub find it alike
