#!/usr/bin/env bash
# Issue 33's first GPU check of the CUDA C attention forward (week4_triton_dl/attention/hopper.py,
# kernels/attention_hopper_forward.cu), on one H100/H200, in about 6 minutes, failing fast. Two builds: the
# default and -DAH_INTRA_OVERLAP=1 (overlap=True: each consumer's softmax of key tile j under its own P V
# wgmma of tile j - 1, never run on a GPU before); AH_OVERLAP=0 leaves the overlap build out everywhere.
# AH_PERSISTENT=1 adds the persistent builds (-DAH_PERSISTENT=1: one block per SM walking the work tiles; with
# the overlap too unless AH_OVERLAP=0) to every step: cubins, their own smokes (2p, 2po; not fatal), tests, bench
# rows hopper_persistent(_overlap), sanitizers (5p, 5po, on a case where blocks run two work tiles). Its four
# extensions build in parallel in step 1 (~2-3 min cold): e.g. AH_PERSISTENT=1 BUDGET_S=590.
# AH_DYNAMIC=1 adds the persistent builds with the dynamic tile scheduler (-DAH_DYNAMIC_TILES=1: tiles drawn from a
# global counter; with the overlap too unless AH_OVERLAP=0) the same way: cubins, smokes (2d, 2do: launches in a
# row, so a counter not left at zero shows as NaN left), tests, bench rows hopper_dynamic(_overlap) (each with its
# speedup_vs_static where AH_PERSISTENT=1 times the static twin), sanitizers (5d, 5do). For the A/B at causal
# S = 16k: AH_PERSISTENT=1 AH_DYNAMIC=1 AH_OVERLAP=0 BUDGET_S=590 (the default, persistent and dynamic builds).
#   1. both sm_90a cubins with hopper.py's own nvcc command: registers, spills, SASS opcode counts
#      (HGMMA, UTMALDG, MUFU.EX2, BAR, the wgmma waits), then both extensions built by load_inline (cached);
#   2. a smoke launch in its own process under a 60 s timeout (an mbarrier phase, an expect-tx byte
#      count or a ping-pong barrier mistake hangs the GPU: this is where it shows, and nothing else
#      runs after it): small shapes first, D = 64 and 128, fp16 and bf16, causal and not; if it
#      fails, the same smoke without the ping-pong (-DAH_PINGPONG=0) says which half to look at;
#      then (2o) the same smoke of the overlap build, in its own process: if it fails or hangs, the
#      default's steps still run and the overlap's tests and bench row are left out;
#   3. the tests (pytest, one timeout, faulthandler dumps a hung test's stack; both builds), then (3k) the
#      padding keys' forward tests (tests/week4/test_attention_hopper_padding.py);
#   4. the benchmark (quick mode unless FULL=1): hopper and hopper_overlap beside SDPA cuDNN and the Triton op
#      (host-paced rounds replayed from a CUDA graph: their ratios are the GPU's times);
#   5. compute-sanitizer memcheck, racecheck, synccheck on one small case (S = 200, causal, bf16, one batch
#      element padded to 77 keys), each build;
#   6. with MUST_FAIL=1, the known-wrong kernels, each required to fail its tests.
# Logs and results go to $OUT (logs/NN_name.log; results/attention_hopper.{json,md} with FULL=1, the quick
# run's results/attention_hopper_quick.{json,md}); copy
# $OUT/results/* into week4_triton_dl/results/ and fill the note's figures from them.
#   OUT=/tmp/ah bash tools/gpu_attention_hopper_check.sh      (BUDGET_S=400 by default; FULL=1: the whole bench,
#   e.g. FULL=1 BUDGET_S=580 SKIP="05_sanitizer 05o_sanitizer_overlap" when the sanitizers ran clean already;
#   BUDGET_S=600 MUST_FAIL=1: step 6 too)
# On the lent machine, with .devwheels carried (PyCUDA: the primary context), the setup is sourced here.
set -u
OUT=${OUT:-/tmp/gpu-attention-hopper}
BUDGET_S=${BUDGET_S:-400}
OVERLAP=${AH_OVERLAP:-1}  # 0: the default build alone
PERSISTENT=${AH_PERSISTENT:-0}  # 1: the persistent builds too
DYNAMIC=${AH_DYNAMIC:-0}  # 1: the persistent builds with the dynamic scheduler too
CHECK_DEVWHEELS=1 CHECK_HANG_HINT="a barrier phase / expect-tx / ping-pong mismatch"
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)
export COURSE_FAILURE_LOG="$OUT/logs/failures.log"
# The extension's build cache in $OUT: its log shows a cold build, and steps 2-5 reuse it. AH_CACHE=DIR keeps it
# elsewhere, e.g. /tmp/ah-cache on the lent machine, so the next call of the same lease builds nothing.
export XDG_CACHE_HOME="${AH_CACHE:-$OUT/cache}"

BUILD_LIMIT=240; { [ "$PERSISTENT" = 1 ] || [ "$DYNAMIC" = 1 ]; } && BUILD_LIMIT=360
step 01_build $BUILD_LIMIT 1 "python - <<'PY'
import re, shutil, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from course import runtime
from week4_triton_dl.attention import hopper as hp
builds = [dict(overlap=o, persistent=p) for p in ((False, True) if '$PERSISTENT' == '1' else (False,))
          for o in ((False, True) if '$OVERLAP' != '0' else (False,))]
builds += [dict(overlap=o, persistent=True, dynamic=True) for o in ((False, True) if '$OVERLAP' != '0' else (False,))
           if '$DYNAMIC' == '1']
for build in builds:
    tag = ''.join(f'.{name}' for name, on in build.items() if on)
    out = Path('$OUT') / f'attention_hopper{tag}.sm_90a.cubin'
    built = subprocess.run(hp.nvcc_command(out, runtime.nvcc_path(), **build) + ['-Xptxas', '-v'],
                           capture_output=True, text=True)
    print(f'=== {build}')
    print(built.stderr)
    if built.returncode:
        sys.exit('nvcc failed')
    if shutil.which('cuobjdump'):
        sass = subprocess.run(['cuobjdump', '-sass', str(out)], capture_output=True, text=True).stdout
        (Path('$OUT') / f'attention_hopper{tag}.sm_90a.sass').write_text(sass)
        for kernel in re.split(r'Function : ', sass)[1:]:
            name = kernel.split()[0]
            # The highest register the consumers use (ptxas -v reports the launch bound's 168, not setmaxnreg's 232).
            top = max(int(r) for r in re.findall(r'\bR(\d+)\b', kernel))
            print(name, 'registers R0..R' + str(top), {op: len(re.findall(r'\b' + re.escape(op), kernel)) for op in (
                'HGMMA', 'UTMALDG', 'MUFU.EX2', 'BAR.SYNC', 'BAR.ARV', 'SYNCS', 'DEPBAR.LE gsb0, 0x1', 'DEPBAR.LE gsb0, 0x0')})
# The extensions (load_inline: nvcc and the torch binding, ~1 min each), each in its own process, side by side.
def extension(build):
    code = f'from week4_triton_dl.attention import hopper as hp; e = hp.load_extension(verbose={not any(build.values())}, **{build!r}); print(e.namespace, round(e.build_seconds, 1), e.cached)'
    return build, subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
with ThreadPoolExecutor(len(builds)) as pool:
    for build, done in pool.map(extension, builds):
        print('extension', build, 'namespace, seconds, cached:', done.stdout.strip()[-200:])
        if done.returncode:
            print(done.stdout[-3000:], done.stderr[-3000:])
            sys.exit(f'the extension {build} failed to build')
PY"

SMOKE="python - <<'PY'
import os, torch
from course.check import poisoned, random_tensor
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention.naive import attention_reference
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
cases = [(1, 1, 128, 64), (1, 2, 100, 64), (1, 1, 128, 128), (2, 3, 300, 128), (1, 2, 1000, 64)]
dynamic = os.environ.get('AH_SMOKE_DYNAMIC') == '1'  # the dynamic scheduler: a persistent build
if dynamic or os.environ.get('AH_SMOKE_PERSISTENT') == '1':  # more work tiles than SMs: blocks that run 2 or 3 of them
    cases += [(2, 64, 300, 64), (1, 40, 1000, 128)]
for B, H, S, D in cases:
    for dtype in (torch.bfloat16, torch.float16):
        for causal in (False, True):
            q, k, v = (random_tensor((B, H, S, D), dtype, 'cuda') for _ in range(3))
            out, lse = poisoned((B, H, S, D), dtype, 'cuda'), poisoned((B, H, S), torch.float32, 'cuda')
            hp.attention_hopper_forward(q, k, v, causal, out=out, lse=lse, pingpong=os.environ.get('AH_PINGPONG') != '0',
                                        overlap=os.environ.get('AH_SMOKE_OVERLAP') == '1',
                                        persistent=dynamic or os.environ.get('AH_SMOKE_PERSISTENT') == '1',
                                        dynamic=dynamic)
            torch.cuda.synchronize()
            ref, ref_lse = attention_reference(q, k, v, causal, return_lse=True)
            err = (out.double() - ref).abs().max().item()
            lerr = (lse.double() - ref_lse).abs().max().item()
            print(f'B{B} H{H} S{S} D{D} {dtype} causal={causal}: max |o err| {err:.3g}, |lse err| {lerr:.3g}, '
                  f'NaN left {int(out.isnan().sum())} + {int(lse.isnan().sum())}', flush=True)
            assert err < 0.05 and lerr < 1e-2, 'wrong result'
PY"
if ! step 02_smoke 60 0 "$SMOKE"; then
    # Which half is wrong? The same smoke with the consumers' turn-taking compiled out (-DAH_PINGPONG=0,
    # a second build): passing there points at the named-barrier ping-pong, failing at the ring,
    # the TMA byte counts or the wgmmas.
    step 02b_smoke_no_pingpong 120 0 "AH_PINGPONG=0 $SMOKE" && echo "=== without the ping-pong it passes: look at bar.sync / bar.arrive"
    echo "=== stopping: 02_smoke failed"; exit 1
fi
# The overlap build's smoke, in its own process: not fatal (the default is verified); a failure or a hang
# (look at the wgmma waits: S's group waited alone, P and O untouched until wait_group 0) leaves the
# overlap out of the steps below.
if [ "$OVERLAP" != 0 ] && ! step 02o_smoke_overlap 60 0 "AH_SMOKE_OVERLAP=1 $SMOKE"; then
    echo "=== the overlap build failed its smoke: its tests and bench row are left out"; OVERLAP=0
fi
# The persistent builds' smokes, each in its own process, not fatal either (a hang: look at empty_q, the ring's
# running position, the ping-pong's hand-over between work tiles): a failure leaves that build out below.
PERSISTENT_OVERLAP=$([ "$PERSISTENT" = 1 ] && [ "$OVERLAP" != 0 ] && echo 1 || echo 0)
if [ "$PERSISTENT" = 1 ] && ! step 02p_smoke_persistent 90 0 "AH_SMOKE_PERSISTENT=1 $SMOKE"; then
    echo "=== the persistent build failed its smoke: its tests and bench rows are left out"; PERSISTENT=0; PERSISTENT_OVERLAP=0
fi
if [ "$PERSISTENT_OVERLAP" = 1 ] && ! step 02po_smoke_persistent_overlap 90 0 \
        "AH_SMOKE_PERSISTENT=1 AH_SMOKE_OVERLAP=1 $SMOKE"; then
    echo "=== the persistent overlap build failed its smoke: its tests and bench row are left out"; PERSISTENT_OVERLAP=0
fi
# The dynamic builds' smokes (a hang: look at the mailbox's post and take, the end post on full_q, warpgroup 1's
# last bar.sync; NaN left on a later case: the counter was not reset by the launch before), not fatal either.
DYNAMIC_OVERLAP=$([ "$DYNAMIC" = 1 ] && [ "$OVERLAP" != 0 ] && echo 1 || echo 0)
if [ "$DYNAMIC" = 1 ] && ! step 02d_smoke_dynamic 90 0 "AH_SMOKE_DYNAMIC=1 $SMOKE"; then
    echo "=== the dynamic build failed its smoke: its tests and bench rows are left out"; DYNAMIC=0; DYNAMIC_OVERLAP=0
fi
if [ "$DYNAMIC_OVERLAP" = 1 ] && ! step 02do_smoke_dynamic_overlap 90 0 "AH_SMOKE_DYNAMIC=1 AH_SMOKE_OVERLAP=1 $SMOKE"; then
    echo "=== the dynamic overlap build failed its smoke: its tests and bench row are left out"; DYNAMIC_OVERLAP=0
fi
BENCH_VARIANTS="--variants triton hopper"; NOT=()
if [ "$OVERLAP" = 0 ]; then NOT+=("not overlap"); else BENCH_VARIANTS="$BENCH_VARIANTS hopper_overlap"; fi
# (the dynamic builds' test ids are persistent_dynamic and persistent_dynamic_overlap)
if [ "$PERSISTENT" = 0 ]; then NOT+=("(dynamic or not persistent)"); else BENCH_VARIANTS="$BENCH_VARIANTS hopper_persistent"; fi
if [ "$PERSISTENT" = 1 ] && [ "$PERSISTENT_OVERLAP" = 0 ]; then NOT+=("not persistent_overlap"); fi
[ "$PERSISTENT_OVERLAP" = 1 ] && BENCH_VARIANTS="$BENCH_VARIANTS hopper_persistent_overlap"
if [ "$DYNAMIC" = 0 ]; then NOT+=("not dynamic"); else BENCH_VARIANTS="$BENCH_VARIANTS hopper_dynamic"; fi
if [ "$DYNAMIC" = 1 ] && [ "$DYNAMIC_OVERLAP" = 0 ]; then NOT+=("not dynamic_overlap"); fi
[ "$DYNAMIC_OVERLAP" = 1 ] && BENCH_VARIANTS="$BENCH_VARIANTS hopper_dynamic_overlap"
NOT_K=""; [ ${#NOT[@]} -gt 0 ] && NOT_K="$(IFS='&'; echo "${NOT[*]}" | sed 's/&/ and /g')"  # the builds left out
TESTS_K=""; [ -n "$NOT_K" ] && TESTS_K="-k '$NOT_K'"
TESTS_LIMIT=150; { [ "$PERSISTENT" = 1 ] || [ "$DYNAMIC" = 1 ]; } && TESTS_LIMIT=240
[ "$PERSISTENT" = 1 ] && [ "$DYNAMIC" = 1 ] && TESTS_LIMIT=300

step 03_tests $TESTS_LIMIT 0 "python -m pytest tests/week4/test_attention_hopper.py -q -x -p no:cacheprovider \
    -o faulthandler_timeout=40 --durations=8 $TESTS_K"
# 3k. padding keys (key_lengths): the forward's tests of tests/week4/test_attention_hopper_padding.py, same builds
PAD_K="forward"; [ -n "$NOT_K" ] && PAD_K="forward and $NOT_K"
step 03k_padding_tests 120 0 "python -m pytest tests/week4/test_attention_hopper_padding.py -q -x -p no:cacheprovider \
    -o faulthandler_timeout=40 --durations=5 -k '$PAD_K'"

BENCH_ARGS="--out $OUT/results --rounds 3 --rep-ms 25 $BENCH_VARIANTS"
# The full sweep: 11 sizes, the Triton op autotuning at each, 7 rounds at the capstone's shape: give it 300 s.
BENCH_LIMIT=300
[ "${FULL:-0}" = 1 ] || { BENCH_ARGS="$BENCH_ARGS --quick"; BENCH_LIMIT=100; }
step 04_bench $BENCH_LIMIT 0 "python -m week4_triton_dl.attention.hopper_bench $BENCH_ARGS"

cat > "$OUT/sanitize_case.py" <<'PY'
import os
import torch
from course.check import poisoned, random_tensor
from week4_triton_dl.attention import hopper as hp
dynamic = os.environ.get('AH_SMOKE_DYNAMIC') == '1'
persistent = dynamic or os.environ.get('AH_SMOKE_PERSISTENT') == '1'
H = 35 if persistent else 1  # persistent: 140 work tiles, so that some blocks run two (132 SMs)
q, k, v = (random_tensor((2, H, 200, 64), torch.bfloat16, 'cuda') for _ in range(3))
out = poisoned((2, H, 200, 64), torch.bfloat16, 'cuda')
# Batch 1 has 77 keys of 200: its work tiles stage their last V tile and zero its padding rows (key_lengths).
lengths = torch.tensor([200, 77], device='cuda')
hp.attention_hopper_forward(q, k, v, True, out=out, overlap=os.environ.get('AH_SMOKE_OVERLAP') == '1',
                            persistent=persistent, dynamic=dynamic, key_lengths=lengths)
torch.cuda.synchronize()
print('NaN left', int(out.isnan().sum()))
PY
SANITIZE="S=\$(python -c 'from classroom.sanitize import find_sanitizer; print(find_sanitizer() or \"\")'); \
    [ -n \"\$S\" ] || { echo 'no compute-sanitizer'; exit 1; }; rc=0; \
    for tool in memcheck racecheck synccheck; do echo \"--- \$tool\"; \
      \$S --tool \$tool --error-exitcode 99 --kernel-name kns=attention_hopper_fwd python '$OUT/sanitize_case.py' 2>&1 | tail -n 12; \
      r=\${PIPESTATUS[0]}; echo \"--- \$tool exit \$r\"; [ \$r -ne 0 ] && rc=\$r; done; exit \$rc"
step 05_sanitizer 75 0 "$SANITIZE"
[ "$OVERLAP" != 0 ] && step 05o_sanitizer_overlap 75 0 "export AH_SMOKE_OVERLAP=1; $SANITIZE"
[ "$PERSISTENT" = 1 ] && step 05p_sanitizer_persistent 90 0 "export AH_SMOKE_PERSISTENT=1; $SANITIZE"
[ "$PERSISTENT_OVERLAP" = 1 ] && step 05po_sanitizer_persistent_overlap 90 0 \
    "export AH_SMOKE_PERSISTENT=1 AH_SMOKE_OVERLAP=1; $SANITIZE"
[ "$DYNAMIC" = 1 ] && step 05d_sanitizer_dynamic 90 0 "export AH_SMOKE_DYNAMIC=1; $SANITIZE"
[ "$DYNAMIC_OVERLAP" = 1 ] && step 05do_sanitizer_dynamic_overlap 90 0 "export AH_SMOKE_DYNAMIC=1 AH_SMOKE_OVERLAP=1; $SANITIZE"
# 6. MUST_FAIL=1: the known-wrong kernels (tests/week4/wrong/attention_hopper_forward.py) must fail their tests;
#    each builds its own extension (about a minute), so raise the budget: BUDGET_S=600 MUST_FAIL=1. One of them
#    (a ring slot released before the wgmma wait) is a race: its verdict says how reliably the tests see it.
if [ "${MUST_FAIL:-0}" = 1 ]; then
    step 06_must_fail 360 0 "python -m course exercises --must-fail --only attention_hopper_forward --jobs 1"
fi
echo "=== done in $(( $(date +%s) - start_all )) s; logs in $OUT/logs, results in $OUT/results"
