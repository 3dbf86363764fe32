#!/usr/bin/env bash
# Issue 32's first GPU check of week 4's fused linears (week4_triton_dl/fused_linear/) and of the capstone
# rungs built on them, on one H100/H200, failing fast:
#   1. a smoke launch of every fusion in its own process under a 90 s timeout (compile + one launch each,
#      small odd shapes and the capstone's, results checked against cuBLAS), on both rungs where the TMA
#      rung (kernel_tma.py, sm_90) can run the call;
#   2. the lesson's tests (CPU-sized ones and the capstone's bf16 shapes; the host path with stubbed kernels,
#      test_fused_linear_host.py: on the GPU it reads the real dispatch table), then the capstone's model tests;
#   3. the tile sweep over both rungs, timed by CUDA-graph replay (results/dispatch_fused_linear.json, then
#      read by the launcher) and the interleaved-rounds benchmark (each fusion vs cuBLAS + torch eager,
#      torch.compile, cuBLAS alone; *_graphed: the same calls replayed from CUDA graphs, the GPU's time alone);
#   4. compute-sanitizer memcheck on the smoke launch (small shapes only), not fatal;
#   5. with CAPSTONE=1 (and a BUDGET_S to match): capstone.measure's training phase on the new rungs, its loss phase.
# Logs and results go to $OUT (logs/NN_name.log, results/fused_linear_rounds.{json,md}, capstone/...):
# copy $OUT/results/* into week4_triton_dl/results/ and $OUT/capstone/* into capstone/results/.
#   OUT=/tmp/fl bash tools/gpu_fused_linear_check.sh          (BUDGET_S=590 by default: steps 1-4)
#   SKIP="03_tests 04_capstone_tests" OUT=/tmp/fl bash tools/gpu_fused_linear_check.sh   (steps named in SKIP not run)
set -u
OUT=${OUT:-/tmp/gpu-fused-linear}
BUDGET_S=${BUDGET_S:-590}
mkdir -p "$OUT/capstone"
CHECK_SMI_FIELDS=name,driver_version,clocks.sm,temperature.gpu
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)

cat > "$OUT/smoke.py" <<'PY'
import sys
import torch
import torch.nn.functional as F
from week4_triton_dl.fused_linear import launch, launch_tma
big = len(sys.argv) > 1 and sys.argv[1] == "big"
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
KINDS = ("plain", "bias", "residual", "swiglu", "norm", "norm+swiglu")
small = [(kind, M, K, N) for M, K, N in [(37, 45, 19), (300, 768, 130)] for kind in KINDS]
# The capstone's calls (8 x 1024 tokens, d = 768, hidden 2048): each autotunes once (compiles cached on disk).
capstone = [("norm", 8192, 768, 2304), ("residual", 8192, 768, 768), ("norm+swiglu", 8192, 768, 2048),
            ("swiglu", 8192, 768, 2048), ("residual", 8192, 2048, 768), ("plain", 8192, 768, 50304)]
for kind, M, K, N in (capstone if big else small):
    sw = "swiglu" in kind
    x = torch.randn(M, K, device="cuda", dtype=torch.float32 if "norm" in kind else torch.bfloat16)
    w = torch.randn(2 * N if sw else N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
    kw = dict(swiglu=sw, store_pre=sw)
    if kind == "bias": kw["bias"] = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    if kind == "residual": kw["residual"] = torch.randn(M, N, device="cuda")
    if "norm" in kind: kw["norm_weight"] = torch.randn(K, device="cuda")
    rungs = ["tiled"] + (["tma"] if launch_tma.why_not(x, w, kw.get("norm_weight"), sw) is None else [])
    results = []
    for rung in rungs:
        results.append((rung, launch.fused_linear(x, w, rung=rung, **kw)))
        torch.cuda.synchronize()
    a = F.rms_norm(x, (K,), kw["norm_weight"], 1e-5).bfloat16() if "norm" in kind else x
    bias = kw.get("bias")
    ref = F.linear(a.float(), w.float(), None if bias is None else bias.float())
    if sw:
        g, u = ref.chunk(2, -1); ref = F.silu(g) * u
    if "residual" in kw: ref = ref + kw["residual"]
    for rung, r in results:
        err = float((r.out.float() - ref).abs().max() / ref.abs().max())
        print(f"{kind:12s} {M}x{K}x{N} {rung:5s}: max rel err {err:.2e}")
        assert err < 2e-2, (kind, rung)
print("smoke ok")
PY

step 01_smoke 90 1 "python '$OUT/smoke.py'"
step 02_smoke_big 240 1 "python '$OUT/smoke.py' big"
step 03_tests 300 0 "python -m pytest tests/week4/test_fused_linear.py tests/week4/test_fused_linear_host.py -q -x -p no:cacheprovider -o faulthandler_timeout=240"
step 04_capstone_tests 240 0 "python -m pytest tests/capstone/test_model.py tests/capstone/test_measure.py -q -x -p no:cacheprovider"
step 05_sweep 240 0 "python -m week4_triton_dl.fused_linear.bench --sweep && cp week4_triton_dl/results/dispatch_fused_linear.json '$OUT/results/'"
step 06_bench 240 0 "python -m week4_triton_dl.fused_linear.bench --rounds 5 --out '$OUT/results'"
if command -v compute-sanitizer > /dev/null; then
    step 07_memcheck 120 0 "compute-sanitizer --tool memcheck --target-processes all python '$OUT/smoke.py'"
fi
if [ "${CAPSTONE:-0}" = 1 ]; then  # the capstone's phases take minutes each: run them as their own commands otherwise
    step 08_capstone_train 580 0 "python -m capstone.measure --out '$OUT/capstone' --phases train --budget-s 480 \
        --variants torch fast +swiglu_gemm +residual_gemm +norm_gemm torch.compile fast+compile fused_gemms+compile \
        torch.compile+cudagraphs fast+compile+cudagraphs fused_gemms+compile+cudagraphs"
    step 09_capstone_loss 400 0 "python -m capstone.measure --out '$OUT/capstone' --phases loss --budget-s 380"
fi
echo "=== done in $(( $(date +%s) - deadline + BUDGET_S )) s"
