#!/usr/bin/env bash
# Why does AOTIModelPackageLoader kill the process on the lent H100 (torch 2.11.0+cu130, driver 580,
# SIGSEGV in its constructor for every CUDA package, 2026-12-06/07; notes/aot_package.md, "Where it does
# not load")? One call, under 4 minutes: build the smallest packages there are, then load them in fresh
# processes, each hypothesis in its own process under a timeout, all at once, one verdict line each:
#
#   VERDICT <hypothesis>: ok (loaded, ran, max error E) | SIGSEGV (signal 11) | exit N: <last error line> | timeout
#
# Packages (built side by side, each in its own process): the Linear (64 -> 64, bf16) on CUDA as the GPU
# check built it; the same with its constants as a C++ array instead of the assembler's .incbin
# (aot_inductor.use_consts_asm_build=False); a module with no constants at all (relu * 2: one Triton kernel,
# no weights: is it loading weights, or loading anything?); the same Linear on the CPU (is it CUDA's path?);
# where the machine has another C++ compiler than c++, the CUDA Linear built by it (torch's wheel: GCC 13).
# The CUDA Linear's builder also loads its package in ITS OWN process at the end (no fresh process).
# Then the environment (which CUDA toolkit the wrapper was compiled against, the .so's NEEDED/RUNPATH,
# the CUDA libraries the loading process maps, two runtimes or one) and a gdb backtrace of the baseline.
# Logs under $OUT (default /tmp/gpu-aot-probe), packages under $WORK (default /tmp/gpu-aot-probe-work);
#   OUT=/tmp/probe bash tools/gpu_aot_loader_probe.sh       (from the repo root; about 2-4 minutes)
set -u
OUT=${OUT:-/tmp/gpu-aot-probe}
PY=${PYTHON:-python}
BUILD_S=${BUILD_S:-140}  # each build's limit (they run at once; cold Inductor and Triton caches on a fresh machine)
LOAD_S=${LOAD_S:-45}     # each load's limit (they run at once)
WORK=${WORK:-/tmp/gpu-aot-probe-work}  # the packages and their extracted files: kept out of $OUT (megabytes)
rm -rf "$WORK"; mkdir -p "$WORK/pkg" "$WORK/tmp" "$OUT/logs"
export PYTHONUNBUFFERED=1
t_start=$(date +%s)

cat > "$WORK/build.py" <<'PY'
"""build.py VARIANT DIR: one small package, its input and expected output; linear_cuda also loads it here."""
import os, sys, time, faulthandler
faulthandler.enable()
t0 = time.perf_counter()
import torch
variant, folder = sys.argv[1], sys.argv[2]
device = "cpu" if variant.endswith("_cpu") else "cuda"
dtype = torch.float32 if device == "cpu" else torch.bfloat16
torch.manual_seed(0)
if variant.startswith("relu"):
    class Relu2(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2
    module = Relu2()
else:
    module = torch.nn.Linear(64, 64).to(device, dtype)
x = torch.randn(4, 64, device=device, dtype=dtype)
with torch.no_grad():
    want = module(x)
torch.save({"x": x.cpu(), "want": want.float().cpu()}, os.path.join(folder, variant + ".io.pt"))
options = {"aot_inductor.use_consts_asm_build": False} if variant.endswith("_noasm") else {}
t1 = time.perf_counter()
program = torch.export.export(module, (x,))
t2 = time.perf_counter()
path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(folder, variant + ".pt2"),
                                                inductor_configs=options)
t3 = time.perf_counter()
print(f"BUILT {variant}: import+init {t1 - t0:.1f} s, export {t2 - t1:.1f} s, aoti_compile_and_package {t3 - t2:.1f} s",
      flush=True)
try:  # where the compile went (dynamo_timed phases, seconds): a reading aid for the package tests' budget
    from torch._dynamo.utils import compilation_time_metrics as metrics
    print("PHASES", {k: [round(t, 1) for t in metrics[k]] for k in ("GraphLowering.codegen", "Scheduler.codegen",
          "AotCodeCompiler.compile", "compile_file") if k in metrics}, flush=True)
except Exception as error:
    print("PHASES unavailable:", error, flush=True)
if variant == "linear_cuda":  # the same load in the process that built it (Inductor, Triton, CUDA all initialized)
    print("INPROC loading", flush=True)
    from torch._inductor.package import load_package
    fn = load_package(path)
    got = fn(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    print(f"INPROC ok max error {float((got.float() - want.float()).abs().max()):.3g}", flush=True)
PY

cat > "$WORK/load.py" <<'PY'
"""load.py PACKAGE MODES: load PACKAGE in this fresh process the way MODES say, run it, compare."""
import glob, os, sys, tempfile, zipfile, faulthandler
faulthandler.enable()
path, modes = sys.argv[1], set(filter(None, sys.argv[2].split(",")))
import torch
if "cuda_init" in modes:
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
def cuda_maps():
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            name = line.split()[-1]
            if any(k in name for k in ("libcuda", "libcudart", "libnvrtc", "libtorch_cuda", "libc10_cuda")):
                libs.add(name)
    return sorted(libs)
print("MAPS before", cuda_maps(), flush=True)
device_index = 0 if "device0" in modes else -1
if "metadata" in modes:  # the step _load_aoti takes before the constructor
    meta = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(path, "model")
    print("METADATA", {k: v for k, v in meta.items() if not k.startswith("course.")}, flush=True)
    sys.exit(0)
if "legacy" in modes:  # the runner itself on the extracted .so: no package loader
    folder = tempfile.mkdtemp(dir=os.environ.get("TMPDIR"))
    zipfile.ZipFile(path).extractall(folder)
    so = [s for s in glob.glob(folder + "/**/*.so", recursive=True)][0]
    print("SO", so, flush=True)
    runner = torch._C._aoti.AOTIModelContainerRunnerCuda(so, 1, "cuda", os.path.dirname(so))
    call = lambda x: runner.run([x])
else:
    from torch._inductor.package import load_package
    call = load_package(path, run_single_threaded="single" in modes, device_index=device_index)
print("LOADED; MAPS after", cuda_maps(), flush=True)
io = torch.load(path.replace(".pt2", ".io.pt"))
device = "cpu" if path.endswith("_cpu.pt2") else "cuda"
got = call(io["x"].to(device))
got = got[0] if isinstance(got, (list, tuple)) else got
print(f"RAN max error {float((got.float().cpu() - io['want']).abs().max()):.3g}", flush=True)
PY

# ---------------------------------------------------------------- 1. the packages, built at once
echo "=== building (limit $BUILD_S s each, side by side)"
pids=()
# Another C++ compiler than the default one (Inductor reads $CXX), if this machine has one: torch's wheel was
# built by GCC 13 (gcc-toolset-13), the image's c++ may be older.
ALT_CXX=""
for c in g++-13 g++-14 clang++ g++-12 g++-11; do
    p=$(command -v "$c") && [ "$(readlink -f "$p")" != "$(readlink -f "$(command -v c++)")" ] && { ALT_CXX=$p; break; }
done
VARIANTS="linear_cuda linear_cuda_noasm relu_cuda linear_cpu${ALT_CXX:+ linear_cuda_altcxx}"
for v in $VARIANTS; do
    ( [ "$v" = linear_cuda_altcxx ] && export CXX=$ALT_CXX
      timeout -k 5 "$BUILD_S" "$PY" "$WORK/build.py" "$v" "$WORK/pkg" > "$OUT/logs/build_$v.log" 2>&1
      echo $? > "$OUT/logs/build_$v.rc" ) &
    pids+=($!)
done
wait "${pids[@]}"
for v in $VARIANTS; do
    rc=$(cat "$OUT/logs/build_$v.rc")
    grep -h "^BUILT\|^PHASES" "$OUT/logs/build_$v.log" || echo "BUILD $v failed (exit $rc): $(grep -v '^ ' "$OUT/logs/build_$v.log" | tail -n 1)"
done
# loaded in the process that built it
if grep -q "^INPROC ok" "$OUT/logs/build_linear_cuda.log"; then
    echo "VERDICT in the building process (no fresh process): ok ($(grep '^INPROC ok' "$OUT/logs/build_linear_cuda.log" | cut -c 10-))"
elif grep -q "^INPROC loading" "$OUT/logs/build_linear_cuda.log"; then
    rc=$(cat "$OUT/logs/build_linear_cuda.rc")
    echo "VERDICT in the building process (no fresh process): $([ "$rc" = 139 ] || [ "$rc" = -11 ] && echo SIGSEGV || echo "exit $rc") (log: logs/build_linear_cuda.log)"
fi
echo "=== builds done after $(( $(date +%s) - t_start )) s"

# ---------------------------------------------------------------- 2. the environment
{
    echo "--- nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1
    echo "--- torch"; "$PY" -c "import torch, torch.utils.cpp_extension as c; import re; print(torch.__version__, 'cuda', torch.version.cuda, 'CUDA_HOME', c.CUDA_HOME); show = torch.__config__.show(); print('torch built by', re.findall(r'GCC [0-9.]+|CXX_COMPILER=[^,]+', show))" 2>&1
    echo "--- compilers"; (command -v nvcc && nvcc --version | tail -n 2) 2>&1; (c++ --version | head -n 1) 2>&1
    echo "--- CUDA_HOME=${CUDA_HOME:-unset} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-unset}"; ls -d /usr/local/cuda* 2>&1
    echo "--- ldconfig"; ldconfig -p 2>/dev/null | grep -E "libcuda\.so|libcudart\.so" | head
    echo "--- the wheel's CUDA runtime"; "$PY" -c "import glob, os, torch; d = os.path.dirname(os.path.dirname(torch.__file__)); print(glob.glob(d + '/nvidia/*/lib/libcudart.so*') + glob.glob(d + '/nvidia/cuda_runtime/lib/libcudart.so*'))" 2>&1
    if [ -f "$WORK/pkg/linear_cuda.pt2" ]; then
        mkdir -p "$WORK/pkg/linear_cuda_x" && (cd "$WORK/pkg/linear_cuda_x" && "$PY" -m zipfile -e ../linear_cuda.pt2 . )
        echo "--- package files"; (cd "$WORK/pkg/linear_cuda_x" && find . -type f | sort)
        so=$(find "$WORK/pkg/linear_cuda_x" -name "*.so" | head -n 1)
        echo "--- readelf -d $so"; readelf -d "$so" 2>&1 | grep -E "NEEDED|RPATH|RUNPATH"
        echo "--- ldd"; ldd "$so" 2>&1 | grep -Ei "cuda|torch|c10|not found"
        for f in $(find "$WORK/pkg/linear_cuda_x" -name "*flags*.json"); do echo "--- $f"; head -c 1500 "$f"; echo; done
    fi
} > "$OUT/logs/environment.txt" 2>&1
grep -A3 -E "^--- (torch|compilers|CUDA_HOME|readelf|ldd)" "$OUT/logs/environment.txt" | head -n 40

# ---------------------------------------------------------------- 3. the hypotheses, at once
WHEEL_LIB=$("$PY" -c "import glob, os, torch; d = os.path.dirname(os.path.dirname(torch.__file__)); print(':'.join(sorted(set(os.path.dirname(p) for p in glob.glob(d + '/nvidia/**/libcudart.so*', recursive=True)))))" 2>/dev/null)
P="$WORK/pkg"
# name|package|modes|env
HYPOTHESES=(
    "H0 baseline: load_package in a fresh process (the GPU check's step)|$P/linear_cuda.pt2||"
    "H1 CUDA initialized first (torch.zeros(1, device='cuda'))|$P/linear_cuda.pt2|cuda_init|"
    "H2 run_single_threaded=True|$P/linear_cuda.pt2|cuda_init,single|"
    "H3 device_index=0 (not -1)|$P/linear_cuda.pt2|cuda_init,device0|"
    "H4 legacy AOTIModelContainerRunnerCuda on the extracted .so (no package loader)|$P/linear_cuda.pt2|cuda_init,legacy|"
    "H5 load_metadata_from_package only (the step before the constructor)|$P/linear_cuda.pt2|cuda_init,metadata|"
    "H6 no constants (relu*2: one Triton kernel, no weights)|$P/relu_cuda.pt2|cuda_init|"
    "H7 constants as a C++ array (use_consts_asm_build=False)|$P/linear_cuda_noasm.pt2|cuda_init|"
    "H8 the same Linear as a CPU package|$P/linear_cpu.pt2||"
    "H9 LD_LIBRARY_PATH unset|$P/linear_cuda.pt2|cuda_init|-u LD_LIBRARY_PATH"
    "H10 the wheel's CUDA runtime first on LD_LIBRARY_PATH|$P/linear_cuda.pt2|cuda_init|LD_LIBRARY_PATH=$WHEEL_LIB:${LD_LIBRARY_PATH:-}"
    "H11 CUDA_MODULE_LOADING=EAGER|$P/linear_cuda.pt2|cuda_init|CUDA_MODULE_LOADING=EAGER"
    "H12 TMPDIR elsewhere (the loader extracts the .so there: a noexec /tmp?)|$P/linear_cuda.pt2|cuda_init|TMPDIR=$WORK/tmp"
    "H13 the wrapper compiled by another C++ compiler (CXX=${ALT_CXX:-none found})|$P/linear_cuda_altcxx.pt2|cuda_init|"
)
echo "=== loading (limit $LOAD_S s each, side by side)"
i=0; pids=()
for h in "${HYPOTHESES[@]}"; do
    IFS='|' read -r name pkg modes envs <<< "$h"
    ( if [ -f "$pkg" ]; then
          # shellcheck disable=SC2086
          timeout -k 5 "$LOAD_S" env $envs "$PY" "$WORK/load.py" "$pkg" "$modes" > "$OUT/logs/load_$i.log" 2>&1
          echo $? > "$OUT/logs/load_$i.rc"
      else echo "no package" > "$OUT/logs/load_$i.rc"; fi ) &
    pids+=($!); i=$((i + 1))
done
wait "${pids[@]}"
i=0
for h in "${HYPOTHESES[@]}"; do
    name=${h%%|*}; rc=$(cat "$OUT/logs/load_$i.rc"); log="$OUT/logs/load_$i.log"
    case "$rc" in
        0) v="ok ($(grep -h '^RAN\|^METADATA' "$log" | head -n 1 | cut -c 1-160))" ;;
        139|-11) v="SIGSEGV (signal 11)$(grep -q '^LOADED' "$log" && echo ', after loading: while running')" ;;
        134) v="SIGABRT (signal 6): $(grep -v '^ \|^$' "$log" | grep -iv warn | tail -n 1 | cut -c 1-200)" ;;
        124|137) v="timeout after $LOAD_S s" ;;
        "no package") v="not tried: its package was not built" ;;
        *) v="exit $rc: $(grep -v '^ \|^$' "$log" | tail -n 1 | cut -c 1-200)" ;;
    esac
    echo "VERDICT $name: $v"
    i=$((i + 1))
done
grep -h "^MAPS" "$OUT/logs/load_1.log" 2>/dev/null | head -n 2
echo "=== loads done after $(( $(date +%s) - t_start )) s"

# ---------------------------------------------------------------- 4. where it dies
left=$(( 225 - ($(date +%s) - t_start) ))
if [ -f "$P/linear_cuda.pt2" ] && [ "$left" -gt 15 ]; then
    dbg=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
    if [ -n "$dbg" ]; then
        echo "=== backtrace of H1 ($dbg, limit $left s)"
        timeout -k 5 "$left" "$dbg" -q -batch -ex "set pagination off" -ex run -ex "bt 40" -ex "info sharedlibrary" \
            --args "$PY" "$WORK/load.py" "$P/linear_cuda.pt2" cuda_init > "$OUT/logs/backtrace.log" 2>&1
        grep -E "^#|SIG|signal" "$OUT/logs/backtrace.log" | head -n 45
        grep -Ei "cudart|libcuda|model|\.so.*pt2|tmp" "$OUT/logs/backtrace.log" | grep -E "^0x" | head -n 12
    else
        echo "=== no gdb or cuda-gdb here: faulthandler's Python stack of H1:"; grep -A12 "Fatal Python" "$OUT/logs/load_1.log" | head -n 14
    fi
fi
echo "=== probe done after $(( $(date +%s) - t_start )) s; logs in $OUT/logs (environment.txt: toolkit, NEEDED, RUNPATH)"
