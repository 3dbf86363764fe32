"""Week 5: integration: profile a real model, swap in kernels, CUDA extensions, inference, scale-out."""
