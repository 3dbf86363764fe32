#!/usr/bin/env bash
# Nsight Compute (ncu) on selected week-1 kernels: registers, occupancy, DRAM throughput,
# shared-memory bank conflicts, global-memory sectors per request. Notes: profiling_with_nsight.md.
#
#   bash week1_cuda_python/profile_ncu.sh                 the default groups (about 2-3 minutes on an H100)
#   bash week1_cuda_python/profile_ncu.sh matmul transpose
#   bash week1_cuda_python/profile_ncu.sh --list
#
# Groups: vector_add matmul transpose reduction histogram (default), conv2d matmul_tc (on request).
# Each group is ONE Python process, `python -m course sanitize week1 --launch BENCH --size S
# --variants V...`, which calls each variant of a registered benchmark once; ncu profiles the
# launches whose kernel name matches the group's regex and leaves torch's own kernels alone.
# Kernel names: CUDA C kernels are extern "C", so their names are plain (sgemm_naive). Numba
# mangles its kernels' names with the module path (_ZN17week1_cuda_python9transpose13_tiled_kernel...),
# so matching the *mangled* name (--kernel-name-base mangled) against "week1_cuda_python" catches
# every Numba kernel of the week, including those built in factories (_tiled_kernel.<locals>.kernel).
#
# Writes under $OUT/ncu (OUT defaults to /tmp/ncu-week1):
#   GROUP.ncu-rep      the full report: open it in the Nsight Compute GUI on your own machine
#   GROUP_details.txt  ncu's sections as text, with its own advice ("uncoalesced global accesses ...")
#   GROUP.csv          every collected metric, one row per kernel (ncu --page raw --csv)
#   GROUP.md           the table for profiling_with_nsight.md (`sanitize --ncu-table`)
#   summary.md         all the tables, in order
# --clock-control none: ncu otherwise locks the clocks to base, and the kernels would not run at
# the speed the benchmarks measured. Replays: ncu runs each kernel several times (one pass per
# group of counters), restoring the memory it writes in between; the timings it reports come from
# those replays, not from the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/ncu-week1}
DIR="$OUT/ncu"
PY=${PYTHON:-python3}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
GROUP_TIMEOUT=${GROUP_TIMEOUT:-150}
export COURSE_BACKEND=gpu PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# name ; kernel-name regex (on mangled names) ; benchmark ; size label ; variants (one launch each)
GROUPS_TABLE='
vector_add;week1_cuda_python|vector_add_f32;vector_add_week1;2^26;numba numba_grid_stride cuda_c cuda_c_vec4
matmul;week1_cuda_python|sgemm_;matmul_week1;4096^3;numba_naive numba_tiled numba_regblock cuda_naive cuda_coalesced cuda_shared cuda_blocktile_1d cuda_blocktile_2d cuda_vectorized cuda_warptiling
transpose;week1_cuda_python|transpose_;transpose_week1;8192x8192;naive shared padded cuda_padded cuda_tile64
reduction;week1_cuda_python|sum_warp_shuffle;reduction_week1;2^26;shared_tree warp_shuffle
histogram;week1_cuda_python|histogram_;histogram_u8_week1;2^28;numba_shared cuda_shared cuda_per_warp cuda_per_lane
conv2d;week1_cuda_python|conv2d_;conv2d_week1;8192^2 K=15;numba_naive numba_const numba_tiled cuda_naive cuda_const cuda_tiled cuda_unrolled cuda_regblock
matmul_tc;wmma_;matmul_tc_week1;4096^3 f16;wmma_naive wmma_shared wmma_cp_async
'
DEFAULT_GROUPS="vector_add matmul transpose reduction histogram"

group_line() { printf '%s\n' "$GROUPS_TABLE" | grep "^$1;"; }

if [ "${1:-}" = "--list" ]; then
    printf '%s\n' "$GROUPS_TABLE" | awk -F';' 'NF { printf "%-11s %-19s %-12s %s\n", $1, $3, $4, $5 }'
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

# The sections give ncu's own analysis; the extra metrics are the ones the notes discuss.
SECTIONS=(--section LaunchStats --section Occupancy --section SpeedOfLight)
WANTED=(
    dram__bytes_read.sum dram__bytes_write.sum
    gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed dram__throughput.avg.pct_of_peak_sustained_elapsed
    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
    l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_atom.sum
    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
    l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
)
# Keep only the metrics this ncu knows on this GPU: one unknown name would stop every run.
"$NCU" --query-metrics > "$DIR/query_metrics.txt" 2>&1
METRICS=()
for m in "${WANTED[@]}"; do
    base=${m%%.*}
    if grep -q '__' "$DIR/query_metrics.txt" && ! grep -qE "^${base}([[:space:]]|$)" "$DIR/query_metrics.txt"; then
        echo "note: this ncu has no metric $base; left out"
        continue
    fi
    METRICS+=("$m")
done
metric_list=$(IFS=,; echo "${METRICS[*]}")

"$NCU" --version | tail -n 1 | tee "$DIR/ncu_version.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null \
    | tee "$DIR/gpu.txt"
{ echo "# ncu on week 1's kernels"; echo
  echo "$(cat "$DIR/gpu.txt"); $(cat "$DIR/ncu_version.txt"); $(date -u '+%Y-%m-%d %H:%M UTC');" \
       "\`bash week1_cuda_python/profile_ncu.sh $groups\`, --clock-control none."; } > "$DIR/summary.md"

start_all=$SECONDS
for g in $groups; do
    IFS=';' read -r name regex bench size variants <<< "$(group_line "$g")"
    echo "=== $name: $bench at $size, kernels matching '$regex' (mangled names)"
    start=$SECONDS
    # shellcheck disable=SC2086  # $variants is a list of words on purpose
    timeout "$GROUP_TIMEOUT" "$NCU" --clock-control none --kernel-name-base mangled -k "regex:$regex" \
        "${SECTIONS[@]}" ${metric_list:+--metrics "$metric_list"} -f -o "$DIR/$name" \
        "$PY" -m course sanitize week1 --launch "$bench" --size "$size" --variants $variants \
        > "$DIR/${name}_run.log" 2>&1
    status=$?
    if [ -f "$DIR/$name.ncu-rep" ]; then
        "$NCU" --import "$DIR/$name.ncu-rep" --page raw --csv --print-units base > "$DIR/$name.csv" 2>> "$DIR/${name}_run.log"
        "$NCU" --import "$DIR/$name.ncu-rep" --page details --print-units base > "$DIR/${name}_details.txt" 2>&1
        # shellcheck disable=SC2086
        COURSE_BACKEND=auto "$PY" -m course sanitize week1 --ncu-table "$DIR/$name.csv" --labels $variants \
            > "$DIR/$name.md" 2>&1
    else
        echo "_no report: ncu exited with status $status; see ${name}_run.log_" > "$DIR/$name.md"
        tail -n 15 "$DIR/${name}_run.log"
    fi
    { echo; echo "## $name: \`$bench\` at $size"; echo; cat "$DIR/$name.md"; } >> "$DIR/summary.md"
    echo "--- $name: exit $status after $((SECONDS - start)) s"
    cat "$DIR/$name.md"
done
echo "=== done in $((SECONDS - start_all)) s; tables in $DIR/summary.md"
