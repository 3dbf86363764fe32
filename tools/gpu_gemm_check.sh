#!/usr/bin/env bash
# Issue 32's first GPU check of the wgmma_persistent and wgmma_cluster rungs (week1_cuda_python/matmul_wgmma_persistent.py),
# on one H100/H200, in under 5 minutes, failing fast:
#   1. build the sm_90a cubin with the launcher's own nvcc command; SASS opcode counts (HGMMA, UTMALDG, UTMASTG);
#   2. a smoke launch in its own process under a 60 s timeout (an mbarrier phase mistake hangs the GPU:
#      this is where it shows, and nothing else runs after it);
#   3. the same for the cluster rung (2-block clusters, B multicast), not fatal: if it fails, the
#      rest runs without it;
#   4. the rungs' tests (pytest, one timeout for the file, faulthandler dumps a hung test's stack);
#   5. the interleaved-rounds benchmark: wgmma_persistent (and wgmma_cluster), wgmma_tma, cuBLAS;
#   6. compute-sanitizer (memcheck, racecheck, synccheck) on the new rungs' and wgmma_tma's bf16 cases.
# FUSED=1 runs, after step 1, the fused-epilogue variants (week1_cuda_python/matmul_wgmma_fused.py) instead of
# steps 2-6, so that each run stays within ~5 minutes: 1. their build + SASS too; 2f. a smoke launch of
# every epilogue (60 s, a hang stops the run); 3f. their tests; 4f. compute-sanitizer on their bf16 cases;
# 5f. the quick interleaved bench against cuBLAS + the torch op, eager and torch.compile.
# PINGPONG=1 runs, after step 1, the ping-pong schedule (kernels/matmul_wgmma_pingpong.cu, plain and fused)
# instead of steps 2-6: 1. also its build (ptxas -v); 2p. a smoke launch of every entry point (60 s, a hang
# stops the run: the turn barriers are new); 3p. the tests selected by -k pingpong in both test files;
# 4p. compute-sanitizer on its bf16 cases; 5p. the bench at the capstone's small shapes (--small, its own record
# results/matmul_wgmma_schedules_week1.{json,md}:
# cooperative vs ping-pong vs cuBLAS, each at every tile width), then the fused bench (--quick: wgmma_fused vs
# wgmma_fused_pp, and both at the other widths);
# with MUST_FAIL=1, 7p. the known-wrong kernel without the turn barriers, which those tests must reject;
# with WITH_NCU=1, 8p. ncu on cuBLAS and both schedules at 5000 x 3000 x 4000 and 4096^3 (SKIP= the others).
# EXERCISES=1 runs, after step 1, the wgmma rungs' exercises instead of steps 2-6: 2e. the untouched stubs'
# tests on the GPU (--impl=exercises; every failure must say 'not implemented yet' and nothing may hang: a
# kernel with a hole open is refused before it is loaded); 3e. the known-wrong kernels of
# tests/week1/wrong/matmul_wgmma.py and matmul_wgmma_persistent.py (--must-fail), which the tests must reject.
# Logs and results go to $OUT (logs/NN_name.log, results/matmul_wgmma_persistent_week1.{json,md},
# sanitizer/sanitizer.{md,json}); copy $OUT/results/* into week1_cuda_python/results/, run
# `python -m week1_cuda_python.matmul_wgmma_schedule` (after a PINGPONG=1 run: the schedule rule's table,
# derived from the two records) and `python -m course report` to fill the notes' figures.
#   OUT=/tmp/gemm bash tools/gpu_gemm_check.sh        (BUDGET_S=285 by default; QUICK=1: --quick bench;
#                                                      FUSED=1: the fused epilogues' steps instead of 2-6;
#                                                      PINGPONG=1 BUDGET_S=480: the ping-pong schedule's steps;
#                                                      EXERCISES=1 BUDGET_S=580: the exercises' steps;
#                                                      WITH_NCU=1 BUDGET_S=480: then ncu's wp_4096 group too;
#                                                      with PINGPONG=1: ncu on both schedules, step 08p)
# On the lent machine, with .devwheels carried (PyCUDA: the primary context), the setup is sourced here.
set -u
OUT=${OUT:-/tmp/gpu-gemm}
BUDGET_S=${BUDGET_S:-285}
CHECK_DEVWHEELS=1 CHECK_HANG_HINT="a barrier phase / expect-tx mismatch"
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)
export COURSE_FAILURE_LOG="$OUT/logs/failures.log"

step 01_build_sass 60 1 "python - <<'PY'
import re, shutil, subprocess, sys, tempfile
from pathlib import Path
from course import runtime
from week1_cuda_python import matmul_wgmma_persistent as wp
from week1_cuda_python.matmul_tensor_cores_bench import sass_opcode_counts
out = Path('$OUT') / 'matmul_wgmma_persistent.sm_90a.cubin'
built = subprocess.run(wp.nvcc_command(out, runtime.nvcc_path()) + ['-Xptxas', '-v'], capture_output=True, text=True)
print(built.stderr)
if built.returncode:
    sys.exit('nvcc failed')
if shutil.which('cuobjdump'):  # (else built, and no disassembler here)
    sass = subprocess.run(['cuobjdump', '-sass', str(out)], capture_output=True, text=True).stdout
    (Path('$OUT') / 'matmul_wgmma_persistent.sm_90a.sass').write_text(sass)
    for name, counts in sass_opcode_counts(sass).items():
        print(name, {k: v for k, v in counts.items() if v}, 'UTMASTG', sass.count('UTMASTG'))
if '${FUSED:-0}' == '1':
    from week1_cuda_python import matmul_wgmma_fused as wf
    out = Path('$OUT') / 'matmul_wgmma_fused.sm_90a.cubin'
    built = subprocess.run(wf.nvcc_command(out, runtime.nvcc_path()) + ['-Xptxas', '-v'], capture_output=True, text=True)
    print(built.stderr)
    if built.returncode:
        sys.exit('nvcc failed on the fused variants')
    if shutil.which('cuobjdump'):
        sass = subprocess.run(['cuobjdump', '-sass', str(out)], capture_output=True, text=True).stdout
        (Path('$OUT') / 'matmul_wgmma_fused.sm_90a.sass').write_text(sass)
        print('fused:', {op: sass.count(op) for op in ('HGMMA', 'UTMALDG', 'UTMASTG', 'MUFU.EX2')})
if '${PINGPONG:-0}' == '1':
    out = Path('$OUT') / 'matmul_wgmma_pingpong.sm_90a.cubin'
    built = subprocess.run(wp.nvcc_command(out, runtime.nvcc_path(), source=wp.PINGPONG_SOURCE) + ['-Xptxas', '-v'],
                           capture_output=True, text=True)
    print(built.stderr)
    if built.returncode:
        sys.exit('nvcc failed on the ping-pong entry points')
PY"

if [ "${EXERCISES:-0}" = 1 ]; then
    step 02e_stubs 200 0 "COURSE_LESSON_SMOKE=first COLUMNS=1000 python -m pytest -q -rfE -p no:cacheprovider \
        -p classroom.pytest_lesson -o faulthandler_timeout=60 --impl=exercises tests/week1/test_matmul_tensor_cores.py \
        tests/week1/test_matmul_wgmma_persistent.py tests/week1/test_matmul_wgmma_fused.py \
        tests/week1/test_matmul_wgmma_pingpong.py > '$OUT/logs/stubs_pytest.log' 2>&1; tail -n 3 '$OUT/logs/stubs_pytest.log'; \
        if grep '^FAILED \|^ERROR ' '$OUT/logs/stubs_pytest.log' | grep -v 'not implemented yet'; then \
            echo 'a stub failed for another reason than not implemented yet'; exit 1; fi"
    step 03e_must_fail 360 0 "python -m course exercises --must-fail --only week1/matmul_wgmma \
        week1/matmul_wgmma_persistent --jobs 1"
    echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs"
    exit 0
fi

if [ "${PINGPONG:-0}" = 1 ]; then
    step 02p_smoke_pingpong 60 1 "python - <<'PY'
import torch
from course.check import poisoned, random_tensor
from week1_cuda_python import matmul_wgmma_fused as wf, matmul_wgmma_persistent as wp
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
# one tile; 5 x 3 tiles of 64 rows on 2 blocks (8 and 7: 4 + 4 and 4 + 3 per consumer); 1 block walking
# 11 x 4 tiles; every N a multiple of 16 (SwiGLU's F a multiple of 8)
# The bound is relative, as C is rounded once to bf16/fp16 (half an ulp: 2^-9 |C| in bf16) after an fp32 sum;
# 2^-7 |C| + 0.02 leaves room and stays far below a wrong tile's error (SwiGLU's C reaches ~16, where the
# earlier absolute 0.05 was one bf16 rounding: it failed a correct kernel on 2026-12-07).
for (m, n, k), blocks in (((64, 256, 64), None), ((300, 528, 328), 2), ((700, 1008, 328), 1)):
    for dtype in (torch.bfloat16, torch.float16):
        a, b = random_tensor((m, k), dtype, 'cuda'), random_tensor((k, n), dtype, 'cuda', scale=k ** -0.5)
        out = poisoned((m, n), dtype, 'cuda')
        wp.launch_persistent(a, b, out, blocks=blocks, schedule='pingpong')
        torch.cuda.synchronize()
        want = a.float() @ b.float(); err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
        print(f'plain {m}x{n}x{k} {dtype} blocks={blocks}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
        assert err <= 1, 'wrong result'
        for epilogue in wf.EPILOGUES:
            x, w = a, b.t().contiguous()
            extra = {'bias': (n,), 'residual': (m, n)}.get(epilogue)
            extra = random_tensor(extra, dtype, 'cuda') if extra else None
            out = poisoned((m, n // 2 if epilogue == 'swiglu' else n), dtype, 'cuda')
            wf.launch_fused(x, w, epilogue, extra, out, blocks=blocks, schedule='pingpong')
            torch.cuda.synchronize()
            ref = wf.reference(x.float(), w.float(), epilogue, None if extra is None else extra.float())
            want = ref; err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
            print(f'  {epilogue}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
            assert err <= 1, 'wrong result'
PY"
    step 03p_tests_pingpong 180 0 "python -m pytest tests/week1/test_matmul_wgmma_persistent.py \
        tests/week1/test_matmul_wgmma_fused.py -q -x -p no:cacheprovider -o faulthandler_timeout=60 \
        --durations=8 -k pingpong"
    step 04p_sanitizer_pingpong 50 0 "python -m course sanitize week1 --no-warmup --out '$OUT/sanitizer' \
        --only wgmma_pingpong_bf16 wgmma_linear_pingpong_residual_bf16 wgmma_linear_pingpong_swiglu_bf16 \
        --tools memcheck racecheck synccheck --timeout 45 --budget 48 && cat '$OUT/sanitizer/sanitizer.md'"
    # --small times both schedules at every tile width (its default variants): the schedule rule's record
    step 05p_bench_pingpong 90 0 "python -m week1_cuda_python.matmul_wgmma_persistent_bench --small --rounds 5 \
        --rep-ms 20 --out $OUT/results"
    step 06p_bench_fused_pingpong 90 0 "python -m week1_cuda_python.matmul_wgmma_fused_bench --quick --rounds 3 \
        --rep-ms 20 --out $OUT/results"
    # MUST_FAIL=1: the known-wrong kernel without the turn barriers must be rejected by the -k pingpong tests
    # (10 of them, its fixture's selection). It may hang instead of reading stale stages: the fixture's
    # hang_s (150 s) kills its test run and prints the verdict 'hung' inside this step's 240 s.
    if [ "${MUST_FAIL:-0}" = 1 ]; then
        step 07p_must_fail_pingpong 240 0 "python -m course exercises --must-fail \
            --only week1/matmul_wgmma_persistent__pingpong_without_turns --jobs 1"
    fi
    # WITH_NCU=1: ncu --set full on cuBLAS and both schedules at 5000 x 3000 x 4000 (ping-pong's open gap,
    # notes/matmul_wgmma_persistent.md) and 4096^3 (its ordinary loss), bf16: tensor-pipe busy, the
    # consumers' stall reasons (turn barrier vs full barriers), L2 sectors per request. One call each,
    # between cudaProfilerStart/Stop after a warm-up call; raw CSV and details text under $OUT/ncu_odd.
    if [ "${WITH_NCU:-0}" = 1 ]; then
        step 08p_ncu_schedules 200 0 "mkdir -p '$OUT/ncu_odd' && cat > '$OUT/ncu_odd/driver.py' <<'PY'
import torch
from course.check import random_tensor
from week1_cuda_python.matmul_wgmma_persistent import launch_persistent
for m, n, k in ((5000, 3000, 4000), (4096, 4096, 4096)):
    a = random_tensor((m, k), torch.bfloat16, 'cuda')
    b = random_tensor((k, n), torch.bfloat16, 'cuda', scale=k ** -0.5)
    out = torch.empty((m, n), dtype=torch.bfloat16, device='cuda')
    calls = [lambda: torch.matmul(a, b, out=out), lambda: launch_persistent(a, b, out, schedule='cooperative'),
             lambda: launch_persistent(a, b, out, schedule='pingpong')]
    for call in calls:  # builds, cuBLAS's heuristics: outside the profiled range
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f'{m}x{n}x{k}: cuBLAS, cooperative, ping-pong profiled')
PY
NCU=\${NCU:-\$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
rep='$OUT/ncu_odd/schedules'
\$NCU --profile-from-start off --clock-control none --set full -f -o \$rep python '$OUT/ncu_odd/driver.py' &&
\$NCU -i \$rep.ncu-rep --page raw --csv --print-units base > \$rep.csv &&
\$NCU -i \$rep.ncu-rep --page details > \${rep}_details.txt &&
grep -E '^  [a-zA-Z_]|Duration|Compute .SM. Throughput|L2 Cache Throughput|L2 Hit Rate' \${rep}_details.txt | head -80"
    fi
    echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs, results in $OUT/results"
    exit 0
fi

if [ "${FUSED:-0}" = 1 ]; then
    step 02f_smoke_fused 60 1 "python - <<'PY'
import torch
import torch.nn.functional as F
from course.check import poisoned, random_tensor
from week1_cuda_python import matmul_wgmma_fused as wf
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
for epilogue in wf.EPILOGUES:
    for (m, n, k), blocks in (((128, 256, 64), None), ((300, 336, 328), None), ((700, 1008, 328), 1)):
        for dtype in (torch.bfloat16, torch.float16):
            x, w = random_tensor((m, k), dtype, 'cuda'), random_tensor((n, k), dtype, 'cuda', scale=k ** -0.5)
            extra = {'bias': (n,), 'residual': (m, n)}.get(epilogue)
            extra = random_tensor(extra, dtype, 'cuda') if extra else None
            out = poisoned((m, n // 2 if epilogue == 'swiglu' else n), dtype, 'cuda')
            wf.launch_fused(x, w, epilogue, extra, out, blocks=blocks)
            torch.cuda.synchronize()
            ref = wf.reference(x.float(), w.float(), epilogue, None if extra is None else extra.float())
            want = ref; err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
            print(f'{epilogue} {m}x{n}x{k} {dtype} blocks={blocks}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
            assert err <= 1, 'wrong result'
PY"
    step 03f_tests_fused 130 0 "python -m pytest tests/week1/test_matmul_wgmma_fused.py -q -x -p no:cacheprovider \
        -o faulthandler_timeout=60 --durations=8 -k 'not pingpong'"
    # correctness evidence before speed: the sanitizer runs before the bench (the budget may cut the last step)
    step 04f_sanitizer_fused 50 0 "python -m course sanitize week1 --no-warmup --out '$OUT/sanitizer' \
        --only wgmma_linear_bf16 wgmma_linear_bias_bf16 wgmma_linear_residual_bf16 wgmma_linear_swiglu_bf16 --tools memcheck racecheck synccheck --timeout 45 --budget 48 \
        && cat '$OUT/sanitizer/sanitizer.md'"
    step 05f_bench_fused 90 0 "python -m week1_cuda_python.matmul_wgmma_fused_bench --quick --rounds 3 --rep-ms 20 \
        --out $OUT/results"
    echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs, results in $OUT/results"
    exit 0
fi

step 02_smoke 60 1 "python - <<'PY'
import torch
from course.check import poisoned, random_tensor
from week1_cuda_python import matmul_wgmma_persistent as wp
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
for (m, n, k), blocks in (((128, 256, 64), None), ((300, 520, 328), None), ((700, 1000, 328), 1)):
    for dtype in (torch.bfloat16, torch.float16):
        a, b = random_tensor((m, k), dtype, 'cuda'), random_tensor((k, n), dtype, 'cuda', scale=k ** -0.5)
        out = poisoned((m, n), dtype, 'cuda')
        wp.launch_persistent(a, b, out, blocks=blocks)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        want = ref; err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
        print(f'{m}x{n}x{k} {dtype} blocks={blocks}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
        assert err <= 1, 'wrong result'
PY"

# The cluster rung in its own process: if it hangs or fails, the persistent rung's checks still run
# (its tests deselected with -k 'not cluster', its bench column and sanitizer cases dropped).
CLUSTER_OK=0
step 03_smoke_cluster 45 0 "python - <<'PY'
import torch
from course.check import poisoned, random_tensor
from week1_cuda_python import matmul_wgmma_persistent as wp
print('resident clusters of 2:', wp.resident_clusters('wgmma_cluster_bf16', wp.PERSISTENT_TILES.shared_bytes, 2))
for (m, n, k), blocks in (((128, 256, 64), None), ((300, 520, 328), None), ((800, 1000, 328), 2)):
    for dtype in (torch.bfloat16, torch.float16):
        a, b = random_tensor((m, k), dtype, 'cuda'), random_tensor((k, n), dtype, 'cuda', scale=k ** -0.5)
        out = poisoned((m, n), dtype, 'cuda')
        wp.launch_persistent(a, b, out, blocks=blocks, cluster=2)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        want = ref; err = ((out.float() - want).abs() / (2 ** -7 * want.abs() + 0.02)).max().item()
        print(f'{m}x{n}x{k} {dtype} blocks={blocks}: max |err| / bound {err:.3g}, NaN left {int(out.isnan().sum())}')
        assert err <= 1, 'wrong result'
PY" && CLUSTER_OK=1
echo "=== cluster rung usable: $CLUSTER_OK"
# (the ping-pong schedule's tests have their own run, PINGPONG=1)
if [ "$CLUSTER_OK" = 1 ]; then SELECT="-k 'not pingpong'"; CASES="wgmma_persistent_bf16 wgmma_cluster_bf16"; VARIANTS="wgmma_tma wgmma_persistent wgmma_cluster"
else SELECT="-k 'not cluster and not pingpong'"; CASES="wgmma_persistent_bf16"; VARIANTS="wgmma_tma wgmma_persistent"; fi

step 04_tests 120 0 "python -m pytest tests/week1/test_matmul_wgmma_persistent.py -q -x -p no:cacheprovider \
    -o faulthandler_timeout=40 --durations=8 $SELECT"

BENCH_ARGS="--out $OUT/results --rounds 5 --rep-ms 25 --variants $VARIANTS"
[ "${QUICK:-0}" = 1 ] && BENCH_ARGS="$BENCH_ARGS --quick"
step 05_bench 90 0 "python -m week1_cuda_python.matmul_wgmma_persistent_bench $BENCH_ARGS"

step 06_sanitizer 60 0 "python -m course sanitize week1 --no-warmup --out '$OUT/sanitizer' \
    --only $CASES wgmma_tma_bf16_bf16 --tools memcheck racecheck synccheck \
    --timeout 55 --budget 58 && cat '$OUT/sanitizer/sanitizer.md'"
# Nsight Compute beside cuBLAS (tools/ncu_hopper.sh's wp_4096 group), only when asked: WITH_NCU=1.
if [ "${WITH_NCU:-0}" = 1 ]; then
    step 07_ncu 200 0 "OUT='$OUT' BUDGET=190 GROUP_TIMEOUT=180 bash tools/ncu_hopper.sh wp_4096 && cat '$OUT/ncu_hopper/summary.md'"
fi
echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs, results in $OUT/results"
