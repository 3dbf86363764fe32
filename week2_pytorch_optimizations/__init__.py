"""Week 2: PyTorch on the GPU, optimized.

What a learner needs to know about PyTorch before writing kernels for it: the autograd graph
(`autograd_basics`), the models the week measures (`models`), TorchScript vs torch.compile,
graph breaks and recompiles (`compilation`), torch.compile, AMP and CUDA
graphs on a training and an inference step (`compile_benchmark`, the assignment), memory
(`memory`), mixed precision (`mixed_precision`) and the profiler (`profiling`);
`measure_notes` measures the numbers the notes quote.

No Triton or Numba kernels here: `course.runtime.DEVICE` is "cuda" on a GPU and "cpu"
otherwise, and every function runs on both (the GPU-only effects are tested on the GPU).
"""

# What the course's kit knows of this week (course/weeks.py reads it without importing the week).
COURSE = {"short": "week2", "title": "PyTorch on the GPU, optimized", "order": 2}
