#!/usr/bin/env bash
# Run a batch of steps on the GPU machine inside one time budget, logging each step, and always
# leave the week results/ folders and the logs in $OUT/results.tgz (also when a step times out).
#   bash tools/gpu_run.sh BUDGET_S 'pytest -q tests/week3' 'python -m course bench week3' ...
# On the lent machine `source .devwheels/setup.sh` first (PyCUDA and numpy<2.5 wheels).
set -u
OUT=${OUT:-/tmp/gpu-run}
mkdir -p "$OUT/logs"
export COURSE_BACKEND=gpu PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Every pytest step appends each failure message here as it happens (see tests/conftest.py).
export COURSE_FAILURE_LOG="${COURSE_FAILURE_LOG:-$OUT/logs/failures.log}"
deadline=$(( $(date +%s) + $1 )); shift
finish() {
    tar czf "$OUT/results.tgz" $(ls -d week*/results capstone/results 2>/dev/null) -C "$OUT" logs
}
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader \
    > "$OUT/logs/nvidia-smi.txt"
i=0
for step in "$@"; do
    i=$((i + 1))
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -le 5 ]; then echo "=== [$i] SKIPPED, out of time: $step"; continue; fi
    echo "=== [$i] $step (${left} s left)"
    start=$(date +%s)
    timeout "$left" bash -c "$step" > "$OUT/logs/step$i.log" 2>&1
    echo "=== [$i] exit $? after $(( $(date +%s) - start )) s"
    grep -v -E "^\[#*\.*\]|Warning|warn" "$OUT/logs/step$i.log" | tail -n "${TAIL:-12}"
done
