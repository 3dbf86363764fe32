# The setup and the `step` runner every tools/gpu_*check*.sh shares: sourced, never run.
#
# Why these scripts look the way they do: a kernel's first GPU run happens on a lent machine whose
# calls are cut at 10 minutes, and a synchronisation mistake (an mbarrier phase, an expect-tx byte
# count) does not fail, it hangs the GPU. So a check script is a list of steps, each in its own
# process under its own timeout, the smoke launch first and fatal; every step logs to a file, and
# the whole run keeps inside a budget so that the call ends with the logs written, not mid-step.
#
# A check script sets, then sources this file (from the repository root, as the scripts run):
#   OUT=${OUT:-/tmp/gpu-NAME}; BUDGET_S=${BUDGET_S:-285}     where logs and results go; the run's seconds
#   CHECK_SMI_FIELDS=name,driver_version,...                nvidia-smi's --query-gpu fields (optional)
#   CHECK_DEVWHEELS=0                                       don't source .devwheels/setup.sh even when carried
#                                                           (default: source it, because any step may import
#                                                           week 1's PyCUDA launchers: the fused-linear check's
#                                                           capstone tests did, and failed on a missing pycuda)
#   CHECK_HANG_HINT="a barrier phase / expect-tx mismatch"  what a fatal step's timeout usually means (optional)
#   source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"
# and then runs `step NAME LIMIT_S FATAL COMMAND` lines. Sourcing does the setup (below) at once;
# tests/test_gpu_check_scripts.py runs it on the CPU with a fake nvidia-smi.

# $OUT/logs for the steps' logs, $OUT/results for what the lead copies into the repo's results/.
mkdir -p "$OUT/logs" "$OUT/results"
# The budget is counted from here: the whole run, setup included, must end inside the lent call.
start_all=$(date +%s)
deadline=$(( start_all + BUDGET_S ))
# PyCUDA and its numpy pin come as wheels in .devwheels when the lead carries them; the setup is
# sourced at the top level of the script (not in a function: its variables stay global), its output
# kept out of the way, and a failed setup ends the run before any step (nothing would import).
if [ "${CHECK_DEVWHEELS:-1}" = 1 ] && [ -f .devwheels/setup.sh ]; then
    source .devwheels/setup.sh > "$OUT/logs/00_setup.log" 2>&1 || { echo "setup failed"; cat "$OUT/logs/00_setup.log"; exit 1; }
fi
# The real GPU, never the simulator; Python's output unbuffered so a hung step's log shows how far it
# got; wide lines for pytest; the checkout importable as the repository.
export COURSE_BACKEND=gpu PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Which card, driver, clocks and temperature: the first lines of every log, beside its timings.
nvidia-smi --query-gpu="${CHECK_SMI_FIELDS:-name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw}" \
    --format=csv,noheader > "$OUT/logs/nvidia-smi.txt" 2>&1
cat "$OUT/logs/nvidia-smi.txt"

# step NAME LIMIT_S FATAL COMMAND: run COMMAND with at most LIMIT_S seconds (less if the budget is short),
# log to $OUT/logs/NAME.log, print its tail, return its exit status; a FATAL step that fails ends the script
# with that status. Every line it prints starts with "=== " (logs are read with grep "^=== ").
step() {
    local name=$1 limit=$2 fatal=$3 cmd=$4
    # SKIP="03_tests 04_x" leaves steps out by name: a second call on a lent machine spends its
    # minutes on the steps the first call's budget did not reach (the smoke launch still runs first).
    case " ${SKIP:-} " in *" $name "*) echo "=== $name SKIPPED (SKIP)"; return 0;; esac
    local left=$(( deadline - $(date +%s) ))
    # A step that cannot get 5 s is not started: a started step would be cut mid-way by the lent
    # machine's own limit, and its half-written log read as a failure of the kernel.
    if [ "$left" -le 5 ]; then echo "=== $name SKIPPED: out of budget"; return 1; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit} s, ${left} s left)"
    local t0=$(date +%s)
    # Its own process under a timeout (a hang is killed, -k 5: KILL if TERM is not enough), so the
    # steps after a hung one still run, or the script stops with the log of the one that hung.
    timeout -k 5 "$limit" bash -c "$cmd" > "$OUT/logs/$name.log" 2>&1
    local rc=$?
    echo "=== $name exit $rc after $(( $(date +%s) - t0 )) s"
    tail -n "${TAIL:-15}" "$OUT/logs/$name.log"
    # A fatal step (build, smoke launch) that fails ends the run: nothing after it can mean anything,
    # and after a hang the GPU may not be usable.
    if [ "$rc" -ne 0 ] && [ "$fatal" = 1 ]; then
        [ "$rc" = 124 ] && [ -n "${CHECK_HANG_HINT:-}" ] && echo "=== $name TIMED OUT (a hang: look for $CHECK_HANG_HINT)"
        echo "=== stopping: $name failed"; exit "$rc"
    fi
    return "$rc"
}
