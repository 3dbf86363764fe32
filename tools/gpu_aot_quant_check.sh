#!/usr/bin/env bash
# Issue 34 item 3's first GPU run: the int8 and fp8 AOTInductor packages (week5_integration/aot_quant.py),
# on one H100/H200 (sm_90: fp8 tensor cores), in under 10 minutes, failing fast:
#   1. smoke: the fp8 linear layer (torch._scaled_mm, rowwise scales) and the int8 op eagerly, in their own
#      process under a timeout, against their references (no package: the loader is not involved);
#   2. the loader probe: a one-Linear CUDA package loaded in a fresh process (torch 2.11.0+cu130's
#      AOTIModelPackageLoader died of SIGSEGV on the lent H100 for every CUDA package: this says whether
#      it still does; the package tests skip with that reason when it does);
#   3. the tests: tests/week5/test_aot_quant.py, test_aot_package.py and tests/capstone/test_package_bench.py
#      (with --slow for the bench's own run on the tiny model; the C++ runner's build is left out: item 1's);
#   4. the bench's quantized rows: capstone.package_bench --name aot_package_quant (int8 and fp8 packages of
#      gpt2_124m in bf16: size, compile and load time, ms per token at batch 1 and 8, prefill throughput).
# Logs under $OUT/logs, results under $OUT/results (copy them into capstone/results, then
# `python -m course report`). The float package's rows: `python -m capstone.package_bench --out capstone/results`.
#   OUT=/tmp/aotq bash tools/gpu_aot_quant_check.sh          (BUDGET_S=570 by default)
set -u
OUT=${OUT:-/tmp/gpu-aot-quant}
BUDGET_S=${BUDGET_S:-570}
CHECK_SMI_FIELDS=name,driver_version,compute_cap
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)

step 01_smoke 120 1 "python - <<'PY'
import torch
from course import runtime
from week5_integration import aot_quant as aq, quantization as qz
x = torch.randn(5, 256, device='cuda', dtype=torch.bfloat16)
linear = torch.nn.Linear(256, 96, bias=False).to('cuda', torch.bfloat16)
q, s = qz.quantize_int8(linear.weight)
got = aq.aot_int8_linear(x, q, s)
want = qz.dequant_matmul_torch(x.float(), q, s)
print('int8 op rel err', float((got.float() - want).norm() / want.norm()))
if runtime.has_capability(aq.FP8_MINIMUM):
    layer = aq.Fp8Linear(linear)
    got, want = layer(x).float(), aq.fp8_linear_reference(x.float(), layer)
    print('fp8 linear rel err vs its fp32 reference', float((got - want).norm() / want.norm()))
else:
    print('no fp8 tensor cores here')
PY"

step 02_loader_probe 180 0 "python - <<'PY'
import subprocess, sys, tempfile, torch
from pathlib import Path
folder = Path(tempfile.mkdtemp())
linear = torch.nn.Linear(64, 64).to('cuda', torch.bfloat16)
program = torch.export.export(linear, (torch.randn(4, 64, device='cuda', dtype=torch.bfloat16),))
path = torch._inductor.aoti_compile_and_package(program, package_path=str(folder / 'linear.pt2'))
done = subprocess.run([sys.executable, '-c', 'import sys, torch; from torch._inductor.package import load_package; load_package(sys.argv[1])', path])
print('one-Linear CUDA package load in a fresh process:', 'ok' if done.returncode == 0 else f'exit {done.returncode}')
PY"

step 03_tests 330 0 "python -m pytest tests/week5/test_aot_quant.py tests/week5/test_aot_package.py tests/capstone/test_package_bench.py \
    --slow -k 'not cpp_runner' -q -p no:cacheprovider -rs -o faulthandler_timeout=300"

step 04_bench_quant 420 0 "python -m capstone.package_bench --out '$OUT/results' --name aot_package_quant \
    --variants 'aoti int8 package' 'aoti fp8 package'"
echo "=== done; logs in $OUT/logs, results in $OUT/results"
