#!/usr/bin/env bash
# Issue 33's GPU check of the Hopper attention backward (week4_triton_dl/attention/hopper_backward.py,
# kernels/attention_hopper_backward.cu), on one H100/H200, in about 7 minutes, failing fast. Two builds: the
# default (dQ by TMA reduce-adds of shared-memory tiles) and -DAHB_DQ_TMA=0 (dQ by float2 atomics, the A/B):
#   1. both sm_90a cubins with the launcher's own nvcc command (-Xptxas -v: registers, spills); SASS opcode
#      counts (HGMMA, UTMALDG, UTMAREDG / UBLKRED, USETMAXREG, atomics) where cuobjdump exists;
#   2. both extension builds (load_inline, cached under ~/.cache for the later steps);
#   3. a smoke launch of each build in its own process under a 60 s timeout (an mbarrier phase or expect-tx
#      mistake hangs the GPU: this is where it shows, and nothing else runs after it), against float64
#      autograd; the atomics build's smoke runs even when the default's fails (AHB_SMOKE_DQ_TMA=0): if only
#      the default fails, look at the dQ tile (its swizzle, its tensor map, the bulk-group waits);
#   4. the tests (pytest, one timeout for the file, faulthandler dumps a hung test's stack; both builds);
#   5. the quick benchmark (cuDNN SDPA, Triton, hopper, hopper_atomics; interleaved rounds);
#   6. compute-sanitizer memcheck, racecheck, synccheck on one small case (S = 129, causal, bf16, D = 64),
#      default build;
#   7. with MUST_FAIL=1, the known-wrong kernels, each required to fail its tests.
# Logs and results go to $OUT (logs/NN_name.log, results/attention_hopper_backward_week4.{json,md}); copy
# $OUT/results/* into week4_triton_dl/results/ for the note's figures.
#   OUT=/tmp/ahb bash tools/gpu_attention_hopper_backward_check.sh     (BUDGET_S=450 by default; FULL=1: the
#                                                                       whole benchmark instead of --quick)
# On the lent machine, with .devwheels carried, the setup is sourced here.
set -u
OUT=${OUT:-/tmp/gpu-attention-hopper-backward}
BUDGET_S=${BUDGET_S:-450}
CHECK_DEVWHEELS=1 CHECK_HANG_HINT="an mbarrier phase / expect-tx mismatch"
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)
export COURSE_FAILURE_LOG="$OUT/logs/failures.log"

step 01_build_sass 150 1 "python - <<'PY'
import re, shutil, subprocess, sys
from pathlib import Path
from course import runtime
from week4_triton_dl.attention import hopper_backward as hb
for dq_tma, tag in ((True, ''), (False, '.atomics')):
    out = Path('$OUT') / f'attention_hopper_backward{tag}.sm_90a.cubin'
    built = subprocess.run(hb.nvcc_command(out, runtime.nvcc_path(), dq_tma) + ['-Xptxas', '-v'], capture_output=True, text=True)
    print(f'=== dq_tma={dq_tma}')
    print('\n'.join(l for l in built.stderr.splitlines() if 'Used' in l or 'spill' in l or 'error' in l.lower()))
    if built.returncode:
        print(built.stderr); sys.exit('nvcc failed')
    if not shutil.which('cuobjdump'):
        continue
    sass = subprocess.run(['cuobjdump', '-sass', str(out)], capture_output=True, text=True).stdout
    (Path('$OUT') / f'attention_hopper_backward{tag}.sm_90a.sass').write_text(sass)
    for op in ('HGMMA.64x64x16.F32', 'HGMMA.64x128x16.F32', 'UTMALDG', 'UTMAREDG', 'UBLKRED', 'UBLKCP', 'USETMAXREG',
               'SYNCS', 'RED', 'ATOM', 'BAR.SYNC'):
        print(op, len(re.findall(re.escape(op), sass)))
PY"

step 02_extension 360 1 "python - <<'PY'
import time
from week4_triton_dl.attention import hopper_backward as hb
for dq_tma in (True, False):
    t = time.perf_counter()
    ops = hb.load_extension(dq_tma)
    print('built/loaded', hb.extension_name(dq_tma), f'(dq_tma={dq_tma}) in {time.perf_counter() - t:.1f} s')
PY"

SMOKE="python - <<'PY'
import os
import torch
from course.check import poisoned, random_tensor
from week4_triton_dl.attention import hopper_backward as hb
from week4_triton_dl.attention import naive as an
dq_tma = os.environ.get('AHB_SMOKE_DQ_TMA', '1') != '0'
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability(), 'dq_tma =', dq_tma)
bad = 0
for (B, H, S, D, causal, dtype) in ((1, 1, 128, 64, False, torch.bfloat16), (1, 2, 129, 64, True, torch.bfloat16),
                                    (2, 2, 63, 128, True, torch.float16), (1, 2, 300, 128, False, torch.float16)):
    q, k, v, do = (random_tensor((B, H, S, D), dtype, 'cuda') for _ in range(4))
    scale = D ** -0.5
    o, lse = hb.reference_forward(q, k, v, causal, scale)
    grads = tuple(poisoned(q.shape, dtype, 'cuda') for _ in range(3))
    hb.attention_hopper_backward(q, k, v, o, do, lse, causal, scale, grads=grads,
                                 dq_accum=poisoned(q.shape, torch.float32, 'cuda'), dq_tma=dq_tma)
    torch.cuda.synchronize()
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(an.attention_reference(qd, kd, vd, causal, scale), (qd, kd, vd), do.double())
    bounds = an.attention_error_bounds(q, k, v, do, causal, scale)
    for name, g, w in zip(('dq', 'dk', 'dv'), grads, want):
        err = (g.double() - w).abs()
        ratio = (err / bounds[name]).max().item()
        print(f'B{B} H{H} S{S} D{D} causal={causal} {dtype} {name}: max |err| {err.max().item():.3g}, '
              f'max err/bound {ratio:.3g}, NaN {int(g.isnan().sum())}')
        bad += not (ratio <= 1.0)
assert bad == 0, f'{bad} gradients out of bounds'
PY"
# The atomics build first, not fatal: if the default then fails, the dQ tile's path is where to look.
step 03a_smoke_atomics 60 0 "AHB_SMOKE_DQ_TMA=0 $SMOKE"
step 03b_smoke 60 1 "$SMOKE"

step 04_tests 240 0 "python -m pytest tests/week4/test_attention_hopper_backward.py -q -x -p no:cacheprovider \
    -o faulthandler_timeout=60 --durations=8"
# 4k. padding keys (key_lengths): the backward's tests of tests/week4/test_attention_hopper_padding.py, and the op's
#     autograd, opcheck and compiled call with key_lengths (they run the forward's default build too)
step 04k_padding_tests 180 0 "python -m pytest tests/week4/test_attention_hopper_padding.py -q -x -p no:cacheprovider \
    -o faulthandler_timeout=60 --durations=5 -k 'not forward'"

BENCH_ARGS="--out $OUT/results --rounds 3 --rep-ms 20"
# The whole benchmark: 11 sizes, the Triton backward autotuning at each, 7 rounds at GPT-2's shape: 300 s.
BENCH_LIMIT=300
[ "${FULL:-0}" = 1 ] || { BENCH_ARGS="$BENCH_ARGS --quick"; BENCH_LIMIT=110; }
step 05_bench $BENCH_LIMIT 0 "python -m week4_triton_dl.attention.hopper_backward_bench $BENCH_ARGS"

CASE="from week4_triton_dl.attention import hopper_backward as hb; hb.sanitizer_case()"
for tool in memcheck racecheck synccheck; do
    step 06_sanitizer_$tool 45 0 "compute-sanitizer --tool $tool --error-exitcode 9 python -c '$CASE'"
done
# 7. MUST_FAIL=1: the known-wrong kernels (tests/week4/wrong/attention_hopper_backward.py) must fail their tests;
#    each builds its own extension (about a minute), so raise the budget: BUDGET_S=600 MUST_FAIL=1.
if [ "${MUST_FAIL:-0}" = 1 ]; then
    step 07_must_fail 420 0 "python -m course exercises --must-fail --only attention_hopper_backward --jobs 1"
fi
echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs, results in $OUT/results"
