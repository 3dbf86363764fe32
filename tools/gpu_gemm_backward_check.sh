#!/usr/bin/env bash
# Issue 32's first GPU check of the backward's GEMMs (week1_cuda_python/matmul_wgmma_backward_bench.py), of the
# column-major-A entry dW = dY^T X needs (kernels/matmul_wgmma_persistent.cu, A_KM; wgmma_persistent_a_col_*) and of
# the split-K rung (kernels/matmul_wgmma_split_k.cu, matmul_wgmma_split_k.py), on one H100/H200, in about 6 minutes,
# failing fast:
#   1. smoke launches of the new entries in their own process under a 60 s timeout (fp16 and bf16, one tile, 3 x 3
#      tiles on 2 blocks, a second slab wholly outside A; split-K in 2 and 3 ranges, A both ways): a wrong box count
#      or range hangs on a barrier, and shows here;
#   2. their tests (test_matmul_wgmma_a_col.py, test_matmul_wgmma_split_k.py; the sanitizer cases run as tests), and
#      every wgmma launch captured in a CUDA graph (course.check.check_graph_replays; the benches' graphed rows);
#   3. compute-sanitizer (memcheck, racecheck, synccheck) on the a_col and split-K cases;
#   4. the backward bench: dX and dW of every capstone Linear, cuBLAS beside the rung in interleaved rounds;
#   5. with MUST_FAIL=1, the known-wrong split-K body (tests/week1/wrong/matmul_wgmma_persistent.py), which the
#      split-K tests must reject.
# Results: copy $OUT/results/matmul_wgmma_backward_week1.{json,md} into week1_cuda_python/results/, then
# `python -m course report`; the note's backward paragraph then cites the record.
#   OUT=/tmp/gemm-bwd bash tools/gpu_gemm_backward_check.sh       (BUDGET_S=400 by default; MUST_FAIL=1 BUDGET_S=560)
set -u
OUT=${OUT:-/tmp/gpu-gemm-backward}
BUDGET_S=${BUDGET_S:-400}
CHECK_DEVWHEELS=1 CHECK_HANG_HINT="the A boxes' bytes against the full barrier's expect-tx"
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)
export COURSE_FAILURE_LOG="$OUT/logs/failures.log"

step 01_smoke_a_col 60 1 "python - <<'PY'
import torch
from course.check import poisoned, random_tensor
from week1_cuda_python import matmul_wgmma_persistent as wp
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
for (m, n, k), blocks in (((128, 256, 64), None), ((328, 600, 200), 2), ((136, 264, 72), 1)):
    for dtype in (torch.bfloat16, torch.float16):
        a = random_tensor((k, m), dtype, 'cuda').t()
        b = random_tensor((k, n), dtype, 'cuda', scale=k ** -0.5)
        out = poisoned((m, n), dtype, 'cuda')
        wp.launch_persistent(a, b, out, blocks=blocks)
        torch.cuda.synchronize()
        want = a.float() @ b.float(); err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
        print(f'a_col {m}x{n}x{k} {dtype} blocks={blocks}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
        assert err <= 1, 'wrong result'
from week1_cuda_python import matmul_wgmma_split_k as wk
for (m, n, k), splits in (((128, 256, 128), 2), ((200, 328, 1000), 3)):
    for a_col in (False, True):
        a = random_tensor((k, m), torch.bfloat16, 'cuda').t() if a_col else random_tensor((m, k), torch.bfloat16, 'cuda')
        b = random_tensor((k, n), torch.bfloat16, 'cuda', scale=k ** -0.5)
        out = poisoned((m, n), torch.bfloat16, 'cuda')
        wk.launch_split_k(a, b, out, splits=splits, blocks=5)
        torch.cuda.synchronize()
        want = a.float() @ b.float(); err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
        print(f'split-K {m}x{n}x{k} in {splits} a_col={a_col}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
        assert err <= 1, 'wrong result'
PY"
step 02_tests 180 0 "python -m pytest tests/week1/test_matmul_wgmma_a_col.py tests/week1/test_matmul_wgmma_split_k.py \
    tests/week1/test_matmul_wgmma_persistent.py tests/week1/test_matmul_wgmma_backward_bench.py \
    tests/week1/test_matmul_wgmma_bench_rows.py -q -rs -p no:cacheprovider -o faulthandler_timeout=60 --durations=8 \
    -k 'a_col or split_k or sanitizer or backward or cuda_graph'"
step 03_sanitizer 90 0 "python -m course sanitize week1 --no-warmup --out '$OUT/sanitizer' \
    --only wgmma_persistent_a_col_bf16 wgmma_persistent_a_col_bf16_bn192 wgmma_split_k_bf16 wgmma_split_k_a_col_bf16 \
    --tools memcheck racecheck synccheck --timeout 45 --budget 85 && cat '$OUT/sanitizer/sanitizer.md'"
step 04_bench 200 0 "python -m week1_cuda_python.matmul_wgmma_backward_bench --rounds 5 --rep-ms 20 \
    --out '$OUT/results' && tail -n 30 '$OUT/results/matmul_wgmma_backward_week1.md'"
if [ "${MUST_FAIL:-0}" = 1 ]; then
    step 05_must_fail 200 0 "python -m course exercises --must-fail \
        --only week1/matmul_wgmma_persistent__split_k_range_adds_the_previous_units_sums --jobs 1"
fi
echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs, results in $OUT/results"
