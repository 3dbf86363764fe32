#!/usr/bin/env bash
# Why does AOTIModelPackageLoader kill the process on the lent H100 (torch 2.11.0+cu130, driver 580)?
# One call, under 4 minutes (TOTAL_S), one VERDICT line per hypothesis, then a results record.
#
# What the first run (2026-12-07, week5_integration/results/aot_loader_probe.json) showed:
# * The crash is host code, before any CUDA module, kernel or constant is touched: gdb puts it in
#   torch::aot_inductor::parse_device_str (the model constructor's std::regex over "cuda"), in the
#   regex bracket matcher's locale calls (regex_traits::transform_primary), and those libstdc++
#   functions were symbolized INSIDE the package's wrapper.so, whose NEEDED lists no libstdc++.so.6:
#   the wrapper carried its own copy of libstdc++ into a process where torch had loaded the shared
#   one. Two copies of libstdc++'s locale in one process is a known way for std::regex to die
#   (crosstool-ng/crosstool-ng#2478: the same frames; html-extract/hext#39: bad_cast once another
#   extension loaded libstdc++ first). A -L folder holding only libstdc++.a makes g++ link it so,
#   silently (haikuports/haikuports#3893).
# * Its "timeout after 45 s" verdicts were not hangs in the loader: 14 processes were started at once
#   and each load_package first runs Inductor's CPU-ISA checks (codecache.get_device_information ->
#   cpu_vec_isa.pick_vec_isa: per ISA, under a file lock shared by every process, a `python -c "import
#   torch; ..."` subprocess). The logs of the timed-out loads end before the constructor (no fault
#   report), the metadata-only and legacy-runner loads, which skip those checks, finished.
# So this run: loads at most LOAD_JOBS at a time, each under its own limit, through the loader's
# constructor directly (what load_package calls after the checks) except where load_package itself
# is the hypothesis; a stuck load leaves its Python stack (faulthandler) and its /proc state and
# children behind before it is killed; every STAGE is timed.
#
# Hypotheses (H: a package load, R: the std::regex reproducer tools/aot_probe_regex.cpp):
#   H0  load_package, fresh process (the GPU check's path), its device-info checks timed apart
#   H1  the constructor directly, CUDA initialized first        H2  ... import torch only, no CUDA
#   H3  the wrapper linked against the shared libstdc++ (aot_inductor.custom_op_libs=[":libstdc++.so.6"])
#   H4  H3's package through load_package, run and compared (the fix, end to end)
#   H5  the CPU package (is CUDA involved at all?)               H6  the CPU package, shared libstdc++
#   H7  the wrapper compiled by another C++ compiler             H8  the legacy container runner, no package loader
#   H9  load_metadata_from_package only (a control: no wrapper is loaded)
#   R1  the regex .so with its own libstdc++, after import torch   R2  ... linked to the shared one
#   R3  the regex .so with its own libstdc++, in a process without torch
# Then the environment (which libstdc++ the linker picked and why: the wrapper link rerun with
# -Wl,--trace, g++'s own libstdc++.so/.a, each wrapper's NEEDED and whether it defines libstdc++'s
# locale itself) and a gdb backtrace of the first of H3, H6, H5 that still crashes, if any.
# Not tested, on this evidence: anything of CUDA's (module loading, cubin arch, the runtime on the
# library path, CUDA_LAUNCH_BLOCKING, compute-sanitizer) or of the constants: the process dies before
# the constructor reaches them.
#
#   OUT=/tmp/probe bash tools/gpu_aot_loader_probe.sh      (from the repo root)
# Logs under $OUT/logs, the record in $OUT/aot_loader_probe.json|md (copy both into
# week5_integration/results/), packages under $WORK.
set -u
OUT=${OUT:-/tmp/gpu-aot-probe}
PY=${PYTHON:-python}
TOTAL_S=${TOTAL_S:-225}    # the whole probe (the quant check gives it 240 s)
BUILD_S=${BUILD_S:-150}    # each build's limit (5 at once took 60-67 s each on 2026-12-07)
LOAD_S=${LOAD_S:-30}       # a direct load's limit (import torch + CUDA + the constructor: seconds)
PKG_LOAD_S=${PKG_LOAD_S:-60}  # a load_package load's limit (its ISA checks: a torch import per ISA)
LOAD_JOBS=${LOAD_JOBS:-4}  # loads at once
WORK=${WORK:-/tmp/gpu-aot-probe-work}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RECORD="$PY $REPO/tools/aot_probe_record.py"
rm -rf "$WORK" "$OUT/logs"; mkdir -p "$WORK/pkg" "$WORK/regex" "$OUT/logs"
export PYTHONUNBUFFERED=1
t_start=$(date +%s)
LOG="$OUT/logs/probe.log"   # what the record reads: every line `say` prints
say() { echo "$*" | tee -a "$LOG"; }
left() { echo $(( TOTAL_S - ($(date +%s) - t_start) )); }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

cat > "$WORK/build.py" <<'PY'
"""build.py VARIANT DIR: one small package, its input and expected output; linear_cuda also loads it here.
Every compiler command is logged with its time; the wrapper's link is run again with -Wl,--trace,
which names the libstdc++ file the linker took (libstdc++.so or libstdc++.a)."""
import os, re, shlex, subprocess, sys, time, faulthandler
faulthandler.enable()
t0 = time.perf_counter()
import torch
import torch._inductor.cpp_builder as cpp_builder
variant, folder = sys.argv[1], sys.argv[2]
_compile = cpp_builder._run_compile_cmd
def _logged(cmd_line, cwd):
    t = time.perf_counter()
    _compile(cmd_line, cwd)
    print(f"COMPILE {time.perf_counter() - t:.1f} s: {cmd_line}", flush=True)
    target = re.search(r" -o (\S+\.wrapper\.so)\b", cmd_line)
    if target and " -c " not in cmd_line:
        traced = cmd_line.replace(target.group(1), target.group(1) + ".trace") + " -Wl,--trace"
        run = subprocess.run(shlex.split(traced), cwd=cwd, capture_output=True, text=True)
        for line in (run.stdout + run.stderr).splitlines():
            if "stdc++" in line:
                print(f"LINKTRACE {variant}: {line.strip()}", flush=True)
        if os.path.exists(target.group(1) + ".trace"):
            os.remove(target.group(1) + ".trace")
cpp_builder._run_compile_cmd = _logged
device = "cpu" if "_cpu" in variant else "cuda"
dtype = torch.float32 if device == "cpu" else torch.bfloat16
torch.manual_seed(0)
module = torch.nn.Linear(64, 64).to(device, dtype)
x = torch.randn(4, 64, device=device, dtype=dtype)
with torch.no_grad():
    want = module(x)
torch.save({"x": x.cpu(), "want": want.float().cpu()}, os.path.join(folder, variant + ".io.pt"))
# _shared: the wrapper linked against the shared libstdc++ by name (ld's -l:FILE), before the
# driver's own -lstdc++ could take an archive
options = {"aot_inductor.custom_op_libs": [":libstdc++.so.6"]} if variant.endswith("_shared") else {}
t1 = time.perf_counter()
program = torch.export.export(module, (x,))
t2 = time.perf_counter()
path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(folder, variant + ".pt2"),
                                                inductor_configs=options)
t3 = time.perf_counter()
print(f"BUILT {variant}: import+init {t1 - t0:.1f} s, export {t2 - t1:.1f} s, aoti_compile_and_package {t3 - t2:.1f} s",
      flush=True)
if variant == "linear_cuda":  # the same load in the process that built it (Inductor, Triton, CUDA all initialized)
    print("INPROC loading", flush=True)
    from torch._inductor.package import load_package
    got = load_package(path)(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    print(f"INPROC ok max error {float((got.float() - want.float()).abs().max()):.3g}", flush=True)
PY

cat > "$WORK/load.py" <<'PY'
"""load.py PATH MODES: load PATH in this fresh process as MODES say, run it, compare. STAGE lines
time each step; faulthandler prints every thread's Python stack at PROBE_DUMP_AFTER seconds (a load
that is still there then is stuck, and the stack says where)."""
import os, sys, time, faulthandler
t0 = time.perf_counter()
faulthandler.enable()
faulthandler.dump_traceback_later(float(os.environ.get("PROBE_DUMP_AFTER", "25")), exit=False)
path, modes = sys.argv[1], set(filter(None, sys.argv[2].split(",")))
def stage(name):
    print(f"STAGE {name} {time.perf_counter() - t0:.2f}", flush=True)
def maps():
    keys = ("libcuda", "libcudart", "libtorch_cuda", "libstdc++", "libgcc_s", "wrapper.so", "regex_")
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if any(k in line.split()[-1] for k in keys)})
if "regex" in modes:  # tools/aot_probe_regex.cpp: model_base.h's std::regex in a .so of its own
    import ctypes
    if "torch" in modes:
        import torch
        stage("imported")
    print("MAPS", maps(), flush=True)
    stage("calling")
    lib = ctypes.CDLL(path)
    got = [lib.parse_device_index(s) for s in (b"cuda:3", b"cuda", b"gpu")]
    stage("ran")
    print(f"RAN parse_device_index(cuda:3, cuda, gpu) = {got}", flush=True)
    sys.exit(0 if got == [3, -1, -2] else 3)
import torch
stage("imported")
if "cuda_init" in modes:
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
    stage("cuda_ready")
print("MAPS", maps(), flush=True)
device = "cpu" if "_cpu" in os.path.basename(path) else "cuda"
if "metadata" in modes:  # the step _load_aoti takes before the constructor
    meta = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(path, "model")
    stage("ran")
    print("RAN metadata", {k: v for k, v in meta.items() if k.startswith("AOTI_")}, flush=True)
    sys.exit(0)
if "legacy" in modes:  # the container runner on the extracted .so: no package loader
    import glob, tempfile, zipfile
    folder = tempfile.mkdtemp()
    zipfile.ZipFile(path).extractall(folder)
    so = glob.glob(folder + "/**/*.wrapper.so", recursive=True)[0]
    stage("constructing")
    runner = torch._C._aoti.AOTIModelContainerRunnerCuda(so, 1, "cuda", os.path.dirname(so))
    call = lambda x: runner.run([x])
elif "package" in modes:  # torch._inductor.package.load_package, what the GPU check and the runner use
    from torch._inductor.codecache import get_device_information
    stage("inductor_imported")
    get_device_information(device)  # load_package's CPU-ISA checks (cached: its own call is then free)
    stage("device_info")
    from torch._inductor.package import load_package
    stage("constructing")
    call = load_package(path)
else:  # the constructor load_package calls, without its checks
    stage("constructing")
    loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1)
    call = lambda x: loader.run([x])
stage("loaded")
print("MAPS loaded", maps(), flush=True)
io = torch.load(path.replace(".pt2", ".io.pt"))
got = call(io["x"].to(device))
got = got[0] if isinstance(got, (list, tuple)) else got
stage("ran")
print(f"RAN max error {float((got.float().cpu() - io['want']).abs().max()):.3g}", flush=True)
PY

# ------------------------------------------------ 0. the std::regex reproducer, while the packages build
(
    cd "$WORK/regex" || exit 1
    c++ -O2 -shared -fPIC "$REPO/tools/aot_probe_regex.cpp" -o regex_shared.so > build.log 2>&1
    c++ -O2 -shared -fPIC -static-libstdc++ "$REPO/tools/aot_probe_regex.cpp" -o regex_static.so >> build.log 2>&1
    echo $? > "$OUT/logs/build_regex.rc"
) &
regex_pid=$!

# ------------------------------------------------ 1. the packages, built at once
say "=== building (limit $BUILD_S s each, side by side)"
# Another C++ compiler than the default one (Inductor reads $CXX), if this machine has one.
ALT_CXX=""
for c in g++-14 g++-12 g++-11 clang++; do
    p=$(command -v "$c") && [ "$(readlink -f "$p")" != "$(readlink -f "$(command -v c++)")" ] && { ALT_CXX=$p; break; }
done
VARIANTS="linear_cuda linear_cuda_shared linear_cpu linear_cpu_shared${ALT_CXX:+ linear_cuda_altcxx}"
pids=()
for v in $VARIANTS; do
    ( [ "$v" = linear_cuda_altcxx ] && export CXX=$ALT_CXX
      timeout -k 5 "$BUILD_S" "$PY" "$WORK/build.py" "$v" "$WORK/pkg" > "$OUT/logs/build_$v.log" 2>&1
      echo $? > "$OUT/logs/build_$v.rc" ) &
    pids+=($!)
done
wait "${pids[@]}" "$regex_pid"
for v in $VARIANTS; do
    grep -h "^BUILT\|^LINKTRACE" "$OUT/logs/build_$v.log" | tee -a "$LOG"
    grep -q "^BUILT" "$OUT/logs/build_$v.log" \
        || say "BUILD $v failed (exit $(cat "$OUT/logs/build_$v.rc")): $(grep -v '^ ' "$OUT/logs/build_$v.log" | tail -n 1)"
done
if grep -q "^INPROC ok" "$OUT/logs/build_linear_cuda.log"; then
    say "VERDICT INPROC in the building process (no fresh process): ok ($(grep '^INPROC ok' "$OUT/logs/build_linear_cuda.log" | cut -c 10-))"
elif grep -q "^INPROC loading" "$OUT/logs/build_linear_cuda.log"; then
    rc=$(cat "$OUT/logs/build_linear_cuda.rc")
    say "VERDICT INPROC in the building process (no fresh process): $([ "$rc" = 139 ] && echo "SIGSEGV (signal 11)" || echo "exit $rc")"
fi
say "=== builds done after $(( $(date +%s) - t_start )) s"

# ------------------------------------------------ 2. the environment: which libstdc++, and where from
{
    echo "--- nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1
    echo "--- torch"; "$PY" -c "import torch, re; print(torch.__version__, 'cuda', torch.version.cuda); print('torch built by', re.findall(r'GCC [0-9.]+|CXX_COMPILER=[^,]+', torch.__config__.show()))" 2>&1
    echo "--- compilers"; (c++ --version | head -n 1; command -v nvcc && nvcc --version | tail -n 1; echo "ALT_CXX=${ALT_CXX:-none}") 2>&1
    echo "--- libstdc++ as g++ finds it (LIBRARY_PATH=${LIBRARY_PATH:-unset})"
    for f in libstdc++.so libstdc++.a; do p=$(c++ -print-file-name=$f); echo "$f -> $p $( [ -e "$p" ] && readlink -f "$p" || echo '(absent)')"; done
    ldconfig -p 2>/dev/null | grep "libstdc++"
    echo "--- core dumps: ulimit -c $(ulimit -c), $(cat /proc/sys/kernel/core_pattern 2>/dev/null)"
    for v in $VARIANTS; do
        [ -f "$WORK/pkg/$v.pt2" ] || continue
        mkdir -p "$WORK/pkg/${v}_x" && "$PY" -m zipfile -e "$WORK/pkg/$v.pt2" "$WORK/pkg/${v}_x" 2>&1
        so=$(find "$WORK/pkg/${v}_x" -name "*.wrapper.so" | head -n 1)
        echo "--- wrapper $v $(stat -c %s "$so") bytes"
        readelf -d "$so" 2>&1 | grep -E "NEEDED|RPATH|RUNPATH"
        echo "defines std::locale::classic(): $(nm -C --defined-only "$so" 2>/dev/null | grep -c 'std::locale::classic()')"
    done
} > "$OUT/logs/environment.txt" 2>&1
for v in $VARIANTS; do
    so=$(find "$WORK/pkg/${v}_x" -name "*.wrapper.so" 2>/dev/null | head -n 1)
    [ -n "$so" ] || continue
    needed=$(readelf -d "$so" 2>/dev/null | grep -o "NEEDED.*\[.*\]" | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')
    own=$(nm -C --defined-only "$so" 2>/dev/null | grep -c 'std::locale::classic()')
    case "$needed" in *libstdc++*) kind=shared ;; *) [ "$own" -gt 0 ] && kind="its own copy" || kind="not in NEEDED" ;; esac
    say "LINKED $v: libstdc++ $kind (NEEDED: ${needed% })"
done
grep -A3 "^--- libstdc++ as" "$OUT/logs/environment.txt" | tee -a "$LOG"

# ------------------------------------------------ 3. the hypotheses, LOAD_JOBS at a time
P="$WORK/pkg"; R="$WORK/regex"
# id|limit|name|file|modes|env
cat > "$OUT/logs/hypotheses.txt" <<EOF
R1|$LOAD_S|std::regex in a .so with its own libstdc++, after import torch|$R/regex_static.so|regex,torch|
R2|$LOAD_S|std::regex in a .so linked to the shared libstdc++, after import torch|$R/regex_shared.so|regex,torch|
R3|$LOAD_S|std::regex in a .so with its own libstdc++, no torch in the process|$R/regex_static.so|regex|
H0|$PKG_LOAD_S|load_package in a fresh process (the GPU check's path)|$P/linear_cuda.pt2|package|
H1|$LOAD_S|the loader's constructor directly, CUDA initialized first|$P/linear_cuda.pt2|cuda_init|
H2|$LOAD_S|the loader's constructor directly, import torch only|$P/linear_cuda.pt2||
H3|$LOAD_S|the wrapper linked to the shared libstdc++ (custom_op_libs)|$P/linear_cuda_shared.pt2|cuda_init|
H4|$PKG_LOAD_S|H3's package through load_package (the fix, end to end)|$P/linear_cuda_shared.pt2|package|
H5|$LOAD_S|the same Linear as a CPU package|$P/linear_cpu.pt2||
H6|$LOAD_S|the CPU package linked to the shared libstdc++|$P/linear_cpu_shared.pt2||
H7|$LOAD_S|the wrapper compiled by another C++ compiler (CXX=${ALT_CXX:-none found})|$P/linear_cuda_altcxx.pt2|cuda_init|
H8|$LOAD_S|the legacy container runner on the extracted .so (no package loader)|$P/linear_cuda.pt2|cuda_init,legacy|
H9|$LOAD_S|load_metadata_from_package only (a control: no wrapper loaded)|$P/linear_cuda.pt2|metadata|
EOF

load_one() {  # id limit file modes env: one load in a fresh process, watched; leaves load_ID.{log,rc,time,stuck}
    local id=$1 limit=$2 file=$3 modes=$4 envs=$5 base="$OUT/logs/load_$1" t0 pid c status=""
    if [ ! -f "$file" ]; then echo "not run: its file was not built" > "$base.rc"; return; fi
    t0=$(ms)
    # shellcheck disable=SC2086
    env $envs PROBE_DUMP_AFTER=$(( limit - 4 )) "$PY" "$WORK/load.py" "$file" "$modes" > "$base.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ $(( $(ms) - t0 )) -ge $(( limit * 1000 )) ]; then
            {   echo "state $(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null) cpu_ticks $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null)"
                for t in /proc/"$pid"/task/*; do
                    echo "thread $(cat "$t/comm" 2>/dev/null) $(cut -d' ' -f3 "$t/stat" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
                done
                for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
                    echo "child $c $(tr '\0\n' '  ' < "/proc/$c/cmdline" 2>/dev/null | cut -c 1-200)"
                done
            } > "$base.stuck"
            kill -TERM "$pid" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -KILL "$pid" 2>/dev/null
            status="timeout after $limit s"
            break
        fi
        sleep 0.3
    done
    wait "$pid"; local rc=$?
    echo "${status:-$rc}" > "$base.rc"
    c=$(( $(ms) - t0 )); echo "$(( c / 1000 )).$(( c % 1000 / 100 ))" > "$base.time"
}

say "=== loading (at most $LOAD_JOBS at once; limit $LOAD_S s, load_package $PKG_LOAD_S s)"
while IFS='|' read -r id limit name file modes envs; do
    while [ "$(jobs -rp | wc -l)" -ge "$LOAD_JOBS" ]; do sleep 0.3; done
    if [ "$(left)" -lt $(( limit + 5 )) ]; then
        echo "not run: the probe's $TOTAL_S s were spent" > "$OUT/logs/load_$id.rc"; continue
    fi
    load_one "$id" "$limit" "$file" "$modes" "$envs" < /dev/null &
done < "$OUT/logs/hypotheses.txt"
wait
$RECORD verdicts "$OUT/logs" | tee -a "$LOG"
grep -h "^MAPS" "$OUT/logs/load_H1.log" 2>/dev/null | tee -a "$LOG"
say "=== loads done after $(( $(date +%s) - t_start )) s"

# ------------------------------------------------ 4. where a package load still dies
target=""
for id in H3 H6 H5; do  # the fixed loads first: where a shared libstdc++ did not help, that is the news
    rc=$(cat "$OUT/logs/load_$id.rc" 2>/dev/null)
    if [ "$rc" = 139 ] || [ "$rc" = 134 ]; then target=$id; break; fi
done
dbg=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
if [ -n "$target" ] && [ -n "$dbg" ] && [ "$(left)" -gt 40 ]; then
    IFS='|' read -r _ _ _ file modes envs < <(grep "^$target|" "$OUT/logs/hypotheses.txt")
    say "=== backtrace of $target ($dbg, limit $(( $(left) - 8 )) s)"
    # shellcheck disable=SC2086
    timeout -k 5 $(( $(left) - 8 )) env $envs "$dbg" -q -batch -ex "set pagination off" -ex run -ex "bt 30" \
        -ex "info symbol \$pc" -ex "x/4i \$pc" -ex "info sharedlibrary" \
        --args "$PY" "$WORK/load.py" "$file" "$modes" > "$OUT/logs/backtrace.log" 2>&1 < /dev/null
    grep -E "^#|SIG" "$OUT/logs/backtrace.log" | cut -c 1-220 | head -n 25 | tee -a "$LOG"
else
    say "=== no backtrace (crashed: ${target:-none of H3 H6 H5}; debugger: ${dbg:-none}; $(left) s left)"
fi
say "=== probe done after $(( $(date +%s) - t_start )) s"
bt_arg=(); [ -f "$OUT/logs/backtrace.log" ] && bt_arg=(--backtrace "$OUT/logs/backtrace.log")
$RECORD record --log "$LOG" --env "$OUT/logs/environment.txt" ${bt_arg[@]+"${bt_arg[@]}"} --out "$OUT" \
    && echo "record: $OUT/aot_loader_probe.json|md (copy both into week5_integration/results/)"
