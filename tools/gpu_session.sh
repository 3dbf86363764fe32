#!/usr/bin/env bash
# One batch of GPU work on the lent H100 (or any CUDA machine): the whole test suite for
# real, then the benchmarks of the weeks named, with every log and result under $OUT.
#   bash tools/gpu_session.sh week1 week3
# On the lent machine run `source .devwheels/setup.sh` first (PyCUDA and numpy<2.5 wheels).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" COURSE_BACKEND=gpu PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
    | tee "$OUT/nvidia-smi.txt"
python3 -m course info | tee "$OUT/info.txt"

python3 -m pytest -rs -q ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.txt"
status=${PIPESTATUS[0]}

for week in "$@"; do
    python3 -m course bench "$week" 2>&1 | grep -v '^\[' | tee -a "$OUT/bench.txt"
    package=$(python3 -c "import sys; from course import weeks; print(weeks.resolve(sys.argv[1]).package)" "$week")
    # The test log goes beside the figures: the results/ folder says they come from a green run.
    { echo "# pytest on the GPU, run by tools/gpu_session.sh; $(sed -n 2p "$OUT/nvidia-smi.txt")"
      grep -v -E 'NumbaPerformanceWarning|warn\(errors|^tests/.*::|^$|Docs:' "$OUT/pytest.txt"; } > "$package/results/gpu_pytest.log"
done
tar czf "$OUT/results.tgz" $(ls -d week*/results capstone/results 2>/dev/null)
echo "pytest exit status: $status"
exit "$status"
