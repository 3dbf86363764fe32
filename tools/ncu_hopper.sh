#!/usr/bin/env bash
# Nsight Compute on the H100's tensor-core kernels, in one run: our CUDA C wgmma rung, the Triton
# matmuls and FlashAttention forward, each beside the library kernel it is measured against
# (cuBLAS, cuDNN). For every group: ncu --set full, the raw CSV of every metric, ncu's details
# text, and two tables (classroom/ncu.py): the Hopper table (tensor-pipe use, issue slots, occupancy,
# top stall reasons, DRAM, L2, TMA) and week 1's profiling table.
#
#   OUT=/tmp/x bash tools/ncu_hopper.sh                  every group, in the order below (~4 min)
#   OUT=/tmp/x bash tools/ncu_hopper.sh tc_4096 fa_4096  some groups
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
#   PACKAGE/ncu_hopper.json, .md, ncu_GROUP.csv   what a week's results/ keeps (the .md rendered from
#                         the .json: python -m course ncu --render PACKAGE/ncu_hopper.json)
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
'
# the 5000x3000x4000 matmul: one kernel per variant since the row-aligned B is read in place (until
# 2026-11-27 `triton` copied B into a padded buffer first: two more kernels)
LABELS_triton_5000="triton triton_tma torch"
DEFAULT_GROUPS="tc_4096 triton_4096 triton_5000 fa_4096 tc_8192 tc_2048"
# wp_4096, wp_8192 (issue 32's persistent and cluster wgmma rungs beside wgmma_tma and cuBLAS): by name only

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
# Each week's ncu_hopper.md, from its ncu_hopper.json alone (the same command renders the committed one).
for json in "$DIR"/*/ncu_hopper.json; do
    [ -f "$json" ] && COURSE_BACKEND=auto "$PY" -m course ncu --render "$json"
done
echo "=== done in $((SECONDS - start_all)) s; tables in $DIR/summary.md and $DIR/<package>/ncu_hopper.md"
