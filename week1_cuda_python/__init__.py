"""Week 1: GPU fundamentals and CUDA from Python (Numba, and CUDA C through PyCUDA)."""

# What the course's kit knows of this week (course/weeks.py reads it without importing the week):
# its name and place, and its rows of the performance comparisons (week 3's page).
COURSE = {
    "short": "week1",
    "title": "GPU fundamentals and CUDA from Python",
    "order": 1,
    # numbered rungs, each runnable by number: `python -m course rung matmul_cuda 5`
    "ladders": {"matmul_cuda": "matmul", "matmul_tensor_cores": "matmul_tensor_cores_bench"},
    # results written by a command of their own (`course report` names it where a record is missing):
    # tools/ncu_hopper.sh's ws_* groups write ncu_hopper.json and each group's ncu_GROUP.md, which
    # notes/matmul_wgmma_persistent.md includes: copy $OUT/ncu_hopper/week1_cuda_python/* into results/
    "runners": {
        "ncu_ws_5000": "bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx",
        "ncu_ws_4096": "bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx",
        "ncu_ws_fc2": "bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx",
        "ncu_ws_fc": "bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx",
        "ncu_ws_head": "bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx",
        "ncu_ws_head_dx": "bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx",
    },
    "comparisons": {
        "vector_add": [
            {"file": "vector_add.py", "bench": "vector_add_week1", "size": "2^28", "rows": [
                ("torch.add", "torch"), ("Numba", "numba"), ("Numba, grid-stride loop", "numba_grid_stride"),
                ("CUDA C (PyCUDA)", "cuda_c"), ("CUDA C, float4", "cuda_c_vec4")]}],
        "scale": [
            {"file": "elementwise.py", "bench": "elementwise_unary_week1", "size": "2^28", "rows": [
                ("torch.mul", "torch"), ("Numba", "scale"), ("Numba, 4 per thread", "scale_x4")]}],
        "saxpy": [
            {"file": "elementwise.py", "bench": "saxpy_week1", "size": "2^28", "rows": [
                ("torch.add(y, x, alpha=a)", "torch"), ("Numba", "saxpy"),
                ("Numba, grid-stride loop", "saxpy_grid_stride")]}],
        "transpose": [
            {"file": "transpose.py", "bench": "transpose_week1", "size": "8192x8192", "rows": [
                ("torch (out.copy_(x.t()))", "torch"), ("Numba, naive", "naive"),
                ("Numba, shared-memory tile", "shared"), ("Numba, padded tile", "padded"),
                ("CUDA C, padded tile", "cuda_padded"), ("CUDA C, 64 x 64 tile", "cuda_tile64")]}],
        "sum": [
            {"file": "reduction.py", "bench": "reduction_week1", "size": "2^26", "rows": [
                ("torch.sum", "torch"), ("Numba, one atomic per element", "atomic"),
                ("Numba, shared-memory tree", "shared_tree"), ("CUDA C, warp shuffle", "warp_shuffle")]}],
        "matmul": [
            {"file": "matmul.py", "bench": "matmul_week1", "size": "4096^3", "ceiling": "matmul_float32_tflops",
             "rows": [
                 ("torch.matmul fp32 (cuBLAS, TF32 off)", "torch"), ("Numba fp32, naive", "numba_naive"),
                 ("Numba fp32, shared tiles", "numba_tiled"), ("Numba fp32, register blocking", "numba_regblock"),
                 ("CUDA C fp32, naive", "cuda_naive"), ("CUDA C fp32, shared tiles", "cuda_shared"),
                 ("CUDA C fp32, 2-D block tiles", "cuda_blocktile_2d"),
                 ("CUDA C fp32, warp tiling", "cuda_warptiling")]},
            {"file": "matmul_tensor_cores.py", "bench": "matmul_tc_week1", "size": "4096^3 f16",
             "ceiling": "matmul_float16_tflops", "rows": [
                 ("torch.matmul fp16 (cuBLAS)", "torch"), ("CUDA C fp16 WMMA, naive", "wmma_naive"),
                 ("CUDA C fp16 WMMA, shared tiles", "wmma_shared"),
                 ("CUDA C fp16 WMMA, cp.async", "wmma_cp_async"),
                 ("CUDA C fp16 wgmma + TMA (sm_90a)", "wgmma_tma")]}],
    },
}
