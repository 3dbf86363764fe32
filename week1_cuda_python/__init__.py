"""Week 1: GPU fundamentals and CUDA from Python (Numba, and CUDA C through PyCUDA)."""
