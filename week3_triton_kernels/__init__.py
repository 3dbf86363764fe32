"""Week 3: Triton kernels and the benchmarking framework."""

# What the course's kit knows of this week (course/weeks.py reads it without importing the week):
# its name and place, the performance-comparison page it holds (`python -m course report` makes
# it: each table's rows come from the "comparisons" of every week, in course order) and its rows.
COURSE = {
    "short": "week3",
    "title": "Triton kernels and the benchmarking framework",
    "order": 3,
    # numbered rungs, each runnable by number: `python -m course rung matmul_triton 1`
    "ladders": {"matmul_triton": "matmul_bench", "matmul_triton_epilogue": "matmul_bench",
                "matmul_triton_fp8": "matmul_bench"},
    # results/RECORD.json written by a lesson's own command line (not `course bench`): its command
    "runners": {
        "precision_week3": "python -m week3_triton_kernels.precision_bench --write",
        "precision_k_sweep_week3": "python -m week3_triton_kernels.precision_bench --write",
    },
    "comparison_page": {
        "file": "performance_comparisons.md",
        "title": "Week 3 · Performance comparisons: one operation, several implementations",
        "intro": """\
Each table puts the same operation side by side as written in PyTorch, in Numba and CUDA C
(week 1) and in Triton (week 3), measured by `python -m course bench` on a GPU. Columns: **ms**,
the median time of one call; **GB/s** (bytes each kernel must move at least, divided by its time)
or **TFLOP/s**; **% of copy**, that rate over a device-to-device copy measured in the same run
(for matmul, **% of cuBLAS**: over `torch.matmul` in the same dtype); **vs torch**, the speed
relative to the torch row of the same benchmark run; **LoC**, lines of code of the kernel(s) and
launcher (non-blank, non-comment, non-docstring lines, counted with `inspect` when the
benchmark lists them in `sources=`; "-" otherwise). Rows come from different runs when their
benchmarks differ: the line under each table says which GPU, versions and date.
""",
        "tables": [
            {"id": "vector_add", "title": "Vector add, float32, 2^28 elements", "metric": "gbps"},
            {"id": "scale", "title": "Scale by 2, float32, 2^28 elements", "metric": "gbps"},
            {"id": "saxpy", "title": "SAXPY a*x + y, float32, 2^28 elements", "metric": "gbps"},
            {"id": "mul_add", "title": "x * y + z, float32, 2^26 elements", "metric": "gbps",
             "note": "GB/s counts the fused traffic (4 x n x 4 bytes) for every row."},
            {"id": "bias_gelu", "title": "bias + GELU, float32, 16384 x 8192", "metric": "gbps",
             "note": "GB/s counts the fused traffic for every row; the tanh rows divide by the erf torch row."},
            {"id": "transpose", "title": "Transpose, float32, 8192 x 8192", "metric": "gbps",
             "note": "Every row moves 2 x 4 x 8192^2 bytes; 'torch contiguous copy' copies without "
                     "transposing: the most a transpose can hope for."},
            {"id": "softmax_float32", "title": "Row softmax, float32, 4096 columns", "metric": "gbps"},
            {"id": "softmax_bfloat16", "title": "Row softmax, bfloat16, 4096 columns", "metric": "gbps"},
            {"id": "sum", "title": "Sum of a float32 vector, 2^26 elements", "metric": "gbps"},
            {"id": "matmul", "title": "Matmul 4096^3: fp32 CUDA cores (week 1) vs fp16/bf16 tensor cores (week 3)",
             "metric": "tflops",
             "note": "% of cuBLAS divides by torch.matmul in the row's own dtype, measured in the same "
                     "run; 'vs torch' divides by the torch row of the same benchmark: fp32 rows by fp32 "
                     "cuBLAS, fp16 rows by fp16 cuBLAS."},
            {"id": "dropout", "title": "Dropout p = 0.5, float32, 2^26 elements", "metric": "gbps"},
        ],
    },
    "comparisons": {
        "vector_add": [
            {"file": "vector_add.py", "bench": "vector_add_week3", "size": "2^28", "rows": [("Triton", "triton")]}],
        "mul_add": [
            {"file": "fused_elementwise.py", "bench": "mul_add", "size": "67108864 float32", "rows": [
                ("torch eager (mul, then add)", "torch"), ("torch.addcmul (fused)", "torch_addcmul"),
                ("Triton (fused)", "triton")]}],
        "bias_gelu": [
            {"file": "fused_elementwise.py", "bench": "bias_gelu", "size": "16384x8192 float32", "rows": [
                ("torch eager (add, then gelu)", "torch"), ("Triton (fused)", "triton"),
                ("torch eager, tanh GELU", "torch_tanh"), ("Triton, tanh GELU", "triton_tanh")]}],
        "transpose": [
            # block pointers: registered only where this Triton still has tl.make_block_ptr
            {"file": "access_patterns.py", "bench": "copy2d_week3", "size": "8192x8192",
             "optional": ["triton_block_ptr"], "rows": [
                 ("Triton, 1-D gather", "triton_naive"), ("Triton, 2-D tile", "triton_tiled"),
                 ("Triton, block pointers", "triton_block_ptr"),
                 ("Triton, tensor descriptors (TMA)", "triton_descriptor"),
                 ("torch contiguous copy (the ceiling)", "torch_copy")]}],
        "softmax_float32": [
            {"file": "softmax.py", "bench": "softmax_float32", "size": "cols=4096", "rows": [
                ("torch.softmax", "torch"), ("Triton (softmax: its dispatch)", "triton"),
                ("Triton, one block per row", "triton_one_block"),
                ("Triton, 4 rows per program", "triton_4_rows_per_program"),
                ("Triton, persistent", "triton_persistent"), ("Triton, online (streaming)", "triton_online")]}],
        "softmax_bfloat16": [
            {"file": "softmax.py", "bench": "softmax_bfloat16", "size": "cols=4096", "rows": [
                ("torch.softmax", "torch"), ("Triton (softmax: its dispatch)", "triton"),
                ("Triton, one block per row", "triton_one_block"),
                ("Triton, 4 rows per program", "triton_4_rows_per_program"),
                ("Triton, persistent", "triton_persistent"), ("Triton, online (streaming)", "triton_online")]}],
        "matmul": [
            {"file": "matmul.py", "bench": "matmul_float16", "size": "4096x4096x4096",
             "ceiling": "matmul_float16_tflops", "rows": [
                 ("torch.matmul fp16 (cuBLAS)", "torch"), ("Triton fp16, autotuned", "triton"),
                 ("Triton fp16, no grouping", "triton_ungrouped"), ("Triton fp16, persistent", "triton_persistent"),
                 ("Triton fp16, TMA", "triton_tma")]},
            {"file": "matmul.py", "bench": "matmul_bfloat16", "size": "4096x4096x4096",
             "ceiling": "matmul_bfloat16_tflops", "rows": [
                 ("torch.matmul bf16 (cuBLAS)", "torch"), ("Triton bf16, autotuned", "triton")]}],
        "dropout": [
            {"file": "dropout.py", "bench": "dropout", "size": "2^26", "rows": [
                ("torch dropout (writes a mask)", "torch"), ("Triton, seeded (no mask)", "triton")]}],
    },
}
