#!/usr/bin/env bash
# The first GPU check of course.bench's host-bound detection (course/bench_timing.py: time_gpu's
# host_bound, host_ms, drain_ms; the CUDA-graph replay time where host-bound), on one H100/H200:
#   1. its tests on the GPU (a kernel behind 0.2 ms of Python is flagged and its graph time is the
#      kernel's; a 4096^3 matmul is not flagged; a call that copies to the host cannot be captured,
#      says why, and leaves the device usable), then the kit's tests (time_gpu, graphed variants);
#   2. week 3's vector add through `python -m course bench` (small sizes: the launch floor, expected
#      flagged, with a "GPU ms (graph)" column; large sizes: not flagged);
#   3. week 4's fused linears in interleaved rounds: the rows the host paced (the residual at K = 768
#      and 2048, per the last run's diagnosis) now carry host_bound and a `*` in the table.
# No kernel is new here: the smoke step is the tests' own (each in its own process under a timeout).
# Logs and results go to $OUT (logs/NN_name.log, results/...): copy $OUT/results/fused_linear_rounds.*
# into week4_triton_dl/results/ and $OUT/results/vector_add_week3.* into week3_triton_kernels/results/
# if they are to replace the committed ones, then `python -m course report`.
#   OUT=/tmp/timing bash tools/gpu_bench_timing_check.sh          (BUDGET_S=560 by default)
set -u
OUT=${OUT:-/tmp/gpu-bench-timing}
BUDGET_S=${BUDGET_S:-560}
CHECK_SMI_FIELDS=name,driver_version,clocks.sm,temperature.gpu
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)

step 01_timing_tests 150 1 "python -X faulthandler -m pytest tests/test_bench_timing.py tests/test_bench_rounds.py -q -rs -p no:cacheprovider"
step 02_kit_tests 150 0 "python -X faulthandler -m pytest tests/test_course_kit.py -q -rs -p no:cacheprovider"
step 03_vector_add_bench 120 0 "python -m course bench week3 --only vector_add_week3 --out '$OUT/results/week3' && grep -n 'host\\|\\*' '$OUT/results/week3/vector_add_week3.md' | head -20"
step 04_fused_linear_rounds 300 0 "python -m week4_triton_dl.fused_linear.bench --rounds 3 --out '$OUT/results/week4' && python - <<'PY'
import json
rows = json.load(open('$OUT/results/week4/fused_linear_rounds.json'))['rows']
for r in rows:
    print(f\"{r['size']:28s} {r['variant']:16s} ms {r['ms']:.4f} host_bound {r.get('host_bound')} \"
          f\"host_ms {r.get('host_ms') or 0:.4f} graphed_ms {r.get('graphed_ms')} {r.get('graph_error') or ''}\")
PY"
echo "=== done: logs in $OUT/logs, results in $OUT/results"
