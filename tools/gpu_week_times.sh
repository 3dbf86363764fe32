#!/usr/bin/env bash
# Each week's default tests in its own pytest process (no xdist), every week started at once, each
# with a timing log: what `pytest tests/weekN` costs a learner on this GPU, from a cold Triton
# cache when the machine is fresh. Writes $OUT/logs/serial_<week>.txt, <week>.log, fail_<week>.txt
# and walls.txt ("week1 rc=0 wall=179"), which `python -m course timings LOG --serial DIR` reads.
#   bash tools/gpu_week_times.sh [LIMIT_S]      (LIMIT_S per week, default 300)
# On the lent machine `source .devwheels/setup.sh` first (the timing plugin lives in .devwheels).
set -u
OUT=${OUT:-/tmp/gpu-run}
limit=${1:-300}
mkdir -p "$OUT/logs"
export COURSE_BACKEND=gpu PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
: > "$OUT/logs/walls.txt"
for week in week1 week2 week3 week4 week5 capstone kit; do
    if [ "$week" = kit ]; then targets=$(ls tests/test_*.py); else targets="tests/$week"; fi
    (
        start=$(date +%s)
        COURSE_FAILURE_LOG="$OUT/logs/fail_$week.txt" TIMELOG="$OUT/logs/serial_$week.txt" \
            timeout "$limit" python -m pytest -p pytest_timelog -q -p no:cacheprovider $targets \
            > "$OUT/logs/$week.log" 2>&1
        echo "$week rc=$? wall=$(( $(date +%s) - start ))" >> "$OUT/logs/walls.txt"
    ) &
done
wait
cat "$OUT/logs/walls.txt"
