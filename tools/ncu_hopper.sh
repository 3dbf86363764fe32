#!/usr/bin/env bash
# Nsight Compute on the H100's tensor-core kernels, in one run: our CUDA C wgmma rung, the Triton
# matmuls and FlashAttention forward, each beside the library kernel it is measured against
# (cuBLAS, cuDNN). For every group: ncu --set full, the raw CSV of every metric, ncu's details
# text, and two tables (classroom/ncu.py): the Hopper table (tensor-pipe use, issue slots, occupancy,
# top stall reasons, DRAM, L2, TMA) and week 1's profiling table; beside them the SMs' active share (a last
# wave's idle SMs), each replay's clock and the L2 read requests (classroom/ncu.py's HOPPER_EXTRAS).
#
#   OUT=/tmp/x bash tools/ncu_hopper.sh                  every group, in the order below (~4 min)
#   OUT=/tmp/x bash tools/ncu_hopper.sh tc_4096 fa_4096  some groups
#   OUT=/tmp/x BUDGET=540 bash tools/ncu_hopper.sh fah_4096 fah_4096c fah_gpt2 fahb_4096
#                                                        week 4's CUDA C attention rung beside cuDNN (~8 min)
#   OUT=/tmp/x BUDGET=540 bash tools/ncu_hopper.sh ws_5000 ws_4096 ws_fc2 ws_fc ws_head ws_head_dx
#                                                        week 1's GEMM schedules beside cuBLAS, bf16 (~5 min)
#   bash tools/ncu_hopper.sh --list
#
# Each group is ONE Python process, the course's ncu driver
#   python -m course ncu --package PKG --launch BENCH --size S --variants V... --warmup
# which calls every variant once (Triton autotuning, nvcc builds, cuBLAS/cuDNN heuristics) and
# then once more between cudaProfilerStart and cudaProfilerStop. ncu runs with
# --profile-from-start off, so it profiles exactly the second round: every kernel launched there,
# whatever its name (cuBLAS's nvjet_* / sm90_xmma_*, cuDNN's sdpa kernels, Triton's function
# names). KERNEL_REGEX narrows that if ever needed (ncu -k regex:...); by default nothing is
# filtered by name, so a library kernel with an unexpected name is not lost.
#
# Writes under $OUT/ncu_hopper (OUT defaults to /tmp/ncu-hopper):
#   summary.md            one section per group: the Hopper table, then the week-1 table
#   PACKAGE/ncu_hopper.json, .md, ncu_GROUP.csv, ncu_GROUP.md   what a week's results/ keeps (the .md files
#                         rendered from the .json: python -m course ncu --render PACKAGE/ncu_hopper.json
#                         --sections GROUP...; ncu_GROUP.md is one group's tables, for a note). The .json
#                         starts as the week's committed results/ncu_hopper.json (SEED=0: empty), so it
#                         holds the groups run before and the ones of this run: copy it over the week's.
#   prebuild_N.log        the CUDA extensions some groups build first (PREBUILD_<group>, below)
#   GROUP.csv             every collected metric, one row per kernel (--page raw --csv --print-units base)
#   GROUP_details.txt     ncu's sections as text, with its rule engine's advice
#   GROUP.ncu-rep         the full report, kept only if under 20 MB (open it in the Nsight Compute GUI)
#   GROUP_run.log         the driver's output under ncu
#   metrics_tensor_tma.txt  `ncu --query-metrics --chip gh100` lines matching gmma|tma|tensor, to fix
#                         the Hopper table's metric names if this ncu calls them otherwise
# --clock-control none: ncu otherwise locks the clocks to base, and the kernels would not run at
# the speed the benchmarks measured. The times ncu reports come from its replays (one pass per
# group of counters, caches flushed before each), not from the benchmarks: compare them with each
# other, and take speed from results/.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/ncu-hopper}
DIR="$OUT/ncu_hopper"
PY=${PYTHON:-python3}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
BUDGET=${BUDGET:-230}           # seconds for everything: groups that cannot start in time are skipped
GROUP_TIMEOUT=${GROUP_TIMEOUT:-110}
KEEP_REPORT_BYTES=$((20 * 1024 * 1024))
export COURSE_BACKEND=gpu PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# name ; package ; benchmark ; size label ; variants (launch order = table row order)
GROUPS_TABLE='
tc_4096;week1_cuda_python;matmul_tc_week1;4096^3 f16;wmma_cp_async wgmma_tma torch
triton_4096;week3_triton_kernels;matmul_bfloat16;4096x4096x4096;triton triton_tma torch
triton_5000;week3_triton_kernels;matmul_bfloat16;5000x3000x4000;triton triton_tma torch
fa_4096;week4_triton_dl;attention_fwd_bfloat16_d128;S=4096;triton_flash_blocked triton_flash torch
tc_8192;week1_cuda_python;matmul_tc_week1;8192^3 f16;wgmma_tma wgmma_tma_row_major torch
tc_2048;week1_cuda_python;matmul_tc_week1;2048^3 f16;wgmma_tma torch
wp_4096;week1_cuda_python;matmul_tc_week1;4096^3 f16;wgmma_tma wgmma_persistent wgmma_cluster torch
wp_8192;week1_cuda_python;matmul_tc_week1;8192^3 f16;wgmma_tma wgmma_persistent wgmma_cluster torch
fah_4096;week4_triton_dl;attention_fwd_bfloat16_d128;S=4096;hopper hopper_overlap triton_flash sdpa_cudnn
fah_4096c;week4_triton_dl;attention_fwd_causal_bfloat16_d128;S=4096;hopper hopper_overlap triton_flash_blocked sdpa_cudnn
fah_gpt2;week4_triton_dl;attention_train_week4;8x12x1024x64;hopper triton torch
fahb_4096;week4_triton_dl;attention_fwdbwd_bfloat16_d128;S=4096;hopper triton_flash sdpa_cudnn
ws_5000;week1_cuda_python;matmul_wgmma_shapes_week1;5000x3000x4000 bfloat16;wgmma_persistent wgmma_pingpong wgmma_cluster torch
ws_4096;week1_cuda_python;matmul_wgmma_shapes_week1;4096x4096x4096 bfloat16;wgmma_persistent wgmma_pingpong torch
ws_fc2;week1_cuda_python;matmul_wgmma_shapes_week1;8192x768x3072 bfloat16;wgmma_persistent wgmma_pingpong torch
ws_fc;week1_cuda_python;matmul_wgmma_shapes_week1;8192x3072x768 bfloat16;wgmma_persistent wgmma_pingpong torch
ws_head;week1_cuda_python;matmul_wgmma_shapes_week1;8192x50304x768 bfloat16;wgmma_persistent wgmma_pingpong torch
ws_head_dx;week1_cuda_python;matmul_wgmma_shapes_week1;8192x768x50304 bfloat16;wgmma_persistent wgmma_pingpong torch
'
# the 5000x3000x4000 matmul: one kernel per variant since the row-aligned B is read in place (until
# 2026-11-27 `triton` copied B into a padded buffer first: two more kernels)
LABELS_triton_5000="triton triton_tma torch"
DEFAULT_GROUPS="tc_4096 triton_4096 triton_5000 fa_4096 tc_8192 tc_2048"
# wp_4096, wp_8192 (issue 32's persistent and cluster wgmma rungs beside wgmma_tma and cuBLAS): by name only
# fah_* and fahb_4096 (issue 33's CUDA C attention rung, attention/hopper.py, beside cuDNN and the Triton op;
# by name only, on an H100/H200: elsewhere the week's benchmarks have no hopper variant). The forward at
# B4 H16 S4096 D128 (hopper_bench.py's size), non-causal and causal: one kernel per variant (causal: the
# Triton row is triton_flash_blocked, since the op's dispatch sends D=128 causal to this rung). fah_gpt2: the
# capstone's shape, B8 H12 S1024 D64 causal, forward + backward through autograd (attention_train_week4;
# torch = SDPA's default, cuDNN on an H100). fahb_4096: forward + backward at the fah_4096 size, so the
# backward kernels (hopper's ahb_*, cuDNN's, Triton's delta/dK dV/dQ) beside each other. The fwd+bwd groups
# launch several kernels per variant: their rows are named by kernel (no labels).
# ws_* (issue 32's schedules, matmul_wgmma_persistent_bench.py's BENCHMARKS; by name only, on an H100/H200):
# cooperative (wgmma_persistent) and ping-pong beside cuBLAS, bf16, one kernel each, at 5000 x 3000 x 4000
# (the open gap; the cluster rung too, the best there), 4096^3 (ping-pong's loss), the capstone's fc2
# 8192x768x3072 (ping-pong's win), fc 8192x3072x768 (even waves), the LM head 8192x50304x768 and its
# backward dX 8192x768x50304 (K = 50304, 192 tiles). No PREBUILD: their cubins are built by nvcc inside the
# group's process at the warm-up call (a few seconds each, not cached on disk: a prebuild would not carry).
# Extensions built before ncu starts (nvcc, about a minute each, in parallel, outside every group's limit):
# PREBUILD_<group>, one Python statement per line; the same statement of several groups runs once.
HOPPER_BUILDS='from week4_triton_dl.attention import hopper; hopper.load_extension()
from week4_triton_dl.attention import hopper; hopper.load_extension(overlap=True)
from week4_triton_dl.attention import hopper_backward; hopper_backward.load_extension()'
PREBUILD_fah_4096=$HOPPER_BUILDS
PREBUILD_fah_4096c=$HOPPER_BUILDS
PREBUILD_fah_gpt2=$HOPPER_BUILDS
PREBUILD_fahb_4096=$HOPPER_BUILDS
PREBUILD_TIMEOUT=${PREBUILD_TIMEOUT:-240}

group_line() { printf '%s\n' "$GROUPS_TABLE" | grep "^$1;"; }

if [ "${1:-}" = "--list" ]; then
    printf '%s\n' "$GROUPS_TABLE" | awk -F';' 'NF { printf "%-12s %-22s %-28s %-15s %s\n", $1, $2, $3, $4, $5 }'
    exit 0
fi
groups=${*:-$DEFAULT_GROUPS}
for g in $groups; do
    group_line "$g" > /dev/null || { echo "unknown group $g; see --list" >&2; exit 2; }
done
if ! [ -x "$NCU" ] && ! command -v "$NCU" > /dev/null; then
    echo "ncu (Nsight Compute) not found: NOTHING WAS PROFILED. It ships with the CUDA toolkit." >&2
    exit 2
fi
mkdir -p "$DIR"
start_all=$SECONDS

# The metrics the Hopper table reads, on top of --set full; only those this ncu knows on this GPU
# (one unknown name would stop every run).
"$NCU" --query-metrics > "$DIR/query_metrics.txt" 2>&1
"$NCU" --query-metrics --chip gh100 2>&1 | grep -iE 'gmma|tma|tensor' > "$DIR/metrics_tensor_tma.txt"
METRICS=()
for m in $(COURSE_BACKEND=auto "$PY" -c "from classroom.ncu import HOPPER_METRICS; print(' '.join(HOPPER_METRICS))"); do
    base=${m%%.*}
    if grep -qE "^${base}([[:space:]]|$)" "$DIR/query_metrics.txt"; then
        METRICS+=("$m")
    else
        echo "note: this ncu has no metric $base (left out; the table shows '-' unless --set full has it)"
    fi
done
metric_list=$(IFS=,; echo "${METRICS[*]}")

# A week's committed results/ncu_hopper.json is the starting record: a run adds or replaces its groups
# and keeps the others (SEED=0: start empty).
if [ "${SEED:-1}" = 1 ]; then
    for g in $groups; do
        IFS=';' read -r _ package _ <<< "$(group_line "$g")"
        if [ -f "$package/results/ncu_hopper.json" ] && ! [ -f "$DIR/$package/ncu_hopper.json" ]; then
            mkdir -p "$DIR/$package"
            cp "$package/results/ncu_hopper.json" "$DIR/$package/ncu_hopper.json"
            echo "starting from $package/results/ncu_hopper.json (its groups are kept)"
        fi
    done
fi
prebuilds=$(for g in $groups; do var="PREBUILD_$g"; [ -n "${!var:-}" ] && printf '%s\n' "${!var}"; done | awk 'NF && !seen[$0]++')
if [ -n "$prebuilds" ]; then
    echo "=== prebuild (limit ${PREBUILD_TIMEOUT} s each, in parallel)"
    pids=()
    i=0
    while IFS= read -r statement; do
        i=$((i + 1))
        timeout "$PREBUILD_TIMEOUT" "$PY" -c "$statement" > "$DIR/prebuild_$i.log" 2>&1 &
        pids+=("$!")
        echo "  [$i] $statement"
    done <<< "$prebuilds"
    for j in "${!pids[@]}"; do
        wait "${pids[$j]}" || { echo "prebuild $((j + 1)) failed (exit $?):"; tail -n 15 "$DIR/prebuild_$((j + 1)).log"; }
    done
    echo "--- prebuild done after $((SECONDS - start_all)) s"
fi

"$NCU" --version | tail -n 1 | tee "$DIR/ncu_version.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null \
    | tee "$DIR/gpu.txt"
{ echo "# ncu --set full on the Hopper tensor-core kernels"; echo
  echo "$(cat "$DIR/gpu.txt"); $(cat "$DIR/ncu_version.txt"); $(date -u '+%Y-%m-%d %H:%M UTC');" \
       "\`bash tools/ncu_hopper.sh $groups\`, --clock-control none, profiled after one warm-up call each."
  echo
  echo "Times are ncu's replays (caches flushed per pass), for comparing kernels with each other;"
  echo "speed comes from results/. Stalls: warps stalled per issued instruction, largest three."
  echo "'-': this ncu exported no metric of that name (see metrics_tensor_tma.txt)."; } > "$DIR/summary.md"

for g in $groups; do
    IFS=';' read -r name package bench size variants <<< "$(group_line "$g")"
    left=$((BUDGET - (SECONDS - start_all)))
    if [ "$left" -lt 30 ]; then
        echo "=== $name: SKIPPED, ${left} s of the ${BUDGET} s budget left"
        { echo; echo "## $name: \`$bench\` at $size"; echo; echo "_skipped: out of time_"; } >> "$DIR/summary.md"
        continue
    fi
    limit=$(( left < GROUP_TIMEOUT ? left : GROUP_TIMEOUT ))
    echo "=== $name: $package $bench at $size: $variants (limit ${limit} s)"
    start=$SECONDS
    # shellcheck disable=SC2086  # $variants is a list of words on purpose
    timeout "$limit" "$NCU" --set full --clock-control none --profile-from-start off \
        ${KERNEL_REGEX:+-k "regex:$KERNEL_REGEX"} ${metric_list:+--metrics "$metric_list"} \
        -f -o "$DIR/$name" \
        "$PY" -m course ncu --package "$package" --launch "$bench" --size "$size" --variants $variants --warmup \
        > "$DIR/${name}_run.log" 2>&1
    status=$?
    if [ -f "$DIR/$name.ncu-rep" ]; then
        "$NCU" --import "$DIR/$name.ncu-rep" --page raw --csv --print-units base > "$DIR/$name.csv" 2>> "$DIR/${name}_run.log"
        "$NCU" --import "$DIR/$name.ncu-rep" --page details --print-units base > "$DIR/${name}_details.txt" 2>&1
        # the figures the notes quote: $DIR/<package>/ncu_hopper.json, both tables' figures read once
        # from the CSV (classroom/ncu.py); the command prints the group's section, and ncu_hopper.md is
        # rendered from the JSON when every group has run (below). Copy ncu_hopper.{json,md} and
        # ncu_GROUP.csv into that week's results/. A variant that launches several kernels (the padded
        # copy before a matmul) shows kernel names instead of labels: pass LABELS_<group> to name each
        label_var="LABELS_$name"; labels=${!label_var:-$variants}
        mkdir -p "$DIR/$package"
        cp "$DIR/$name.csv" "$DIR/$package/ncu_$name.csv"
        # shellcheck disable=SC2086  # $labels is a list of words on purpose
        COURSE_BACKEND=auto "$PY" -m course ncu --table "$DIR/$name.csv" --labels $labels \
            --record "$DIR/$package/ncu_hopper.json" --group "$name" --title "$bench at $size" \
            --meta "gpu=$(awk -F', ' '{ print $1 ", driver " $2 }' "$DIR/gpu.txt")" "ncu=$(cat "$DIR/ncu_version.txt")" \
                   "date=$(date -u '+%Y-%m-%d %H:%M UTC')" "how=bash tools/ncu_hopper.sh" \
            > "$DIR/$name.md" 2>&1
        size_bytes=$(stat -c %s "$DIR/$name.ncu-rep")
        if [ "$size_bytes" -ge "$KEEP_REPORT_BYTES" ]; then
            rm -f "$DIR/$name.ncu-rep"
            echo "(report of $((size_bytes / 1048576)) MB dropped: over 20 MB; the CSV and details keep its numbers)"
        fi
    else
        { echo "## $name: $bench at $size"; echo
          echo "_no report: ncu exited with status $status; see ${name}_run.log_"; } > "$DIR/$name.md"
        tail -n 15 "$DIR/${name}_run.log"
    fi
    { echo; cat "$DIR/$name.md"; } >> "$DIR/summary.md"
    echo "--- $name: exit $status after $((SECONDS - start)) s"
    cat "$DIR/$name.md"
done
# Each week's ncu_hopper.md, from its ncu_hopper.json alone (the same command renders the committed one),
# and ncu_GROUP.md of each group this run profiled (its tables alone: what a note's results block includes).
for json in "$DIR"/*/ncu_hopper.json; do
    [ -f "$json" ] || continue
    package=$(basename "$(dirname "$json")")
    sections=()
    for g in $groups; do
        IFS=';' read -r name gpackage _ <<< "$(group_line "$g")"
        [ "$gpackage" = "$package" ] && [ -f "$DIR/$package/ncu_$name.csv" ] && sections+=("$name")
    done
    COURSE_BACKEND=auto "$PY" -m course ncu --render "$json" ${sections[@]:+--sections "${sections[@]}"}
done
echo "=== done in $((SECONDS - start_all)) s; tables in $DIR/summary.md and $DIR/<package>/ncu_hopper.md"
