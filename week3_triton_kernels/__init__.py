"""Week 3: Triton kernels and the benchmarking framework."""
