#!/usr/bin/env bash
# The first GPU run of course/bench_clock.py's LoopClock in the loops lessons drive themselves (issues 31/32):
# week 5's KV-cache decode, kernel-swap training, fine-tuning and scale-out benches and the capstone's measure now time their steps
# on the kit's clock, so their rows carry host_bound / host_ms and their tables a `*` where the host paced
# the steps. No kernel is new: the first step is the clock's own tests on the GPU (a loop of tiny kernels
# behind 0.2 ms of Python is flagged, a loop of 4096^3 matmuls is not), fatal, then the benches, most
# wanted first. Results go to $OUT/results/{week5,capstone}: copy the .json/.md/.png over the committed ones
# in week5_integration/results/ and capstone/results/ to replace them, then `python -m course report`.
# The whole list does not fit one 10-minute call: a second call skips what the first did, e.g.
#   OUT=/tmp/hostflag bash tools/gpu_host_flag_check.sh
#   OUT=/tmp/hostflag SKIP="02_lesson_tests 03_capstone_train_decode 04_kv_cache" bash tools/gpu_host_flag_check.sh
set -u
OUT=${OUT:-/tmp/gpu-host-flag}
BUDGET_S=${BUDGET_S:-560}
CHECK_SMI_FIELDS=name,driver_version,clocks.sm,temperature.gpu
source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"  # setup, budget, step (why: there)

step 01_clock_tests 120 1 "python -X faulthandler -m pytest tests/test_bench_clock.py tests/test_bench_timing.py -q -rs -p no:cacheprovider"
step 02_lesson_tests 240 0 "python -X faulthandler -m pytest tests/week5/test_inference.py tests/week5/test_finetune.py \
tests/week5/test_train.py tests/week5/test_profile_model.py tests/week5/test_multi_gpu.py \
tests/capstone/test_train.py tests/capstone/test_measure.py tests/capstone/test_package_bench.py -q -rs -p no:cacheprovider \
-k 'host or clock or measure_generate or kv_cache or verdict or hopper_attention_loss or decode_loops'"
# the capstone's training ladder and decode (its loss phase has no timing): rows with host_bound, * in the tables
step 03_capstone_train_decode 300 0 "python -m capstone.measure --out '$OUT/results/capstone' --phases train decode \
--budget-s 240 && grep -n 'host_bound\\|\\*' '$OUT/results/capstone/capstone_train.md' '$OUT/results/capstone/capstone_decode.md' | head -40"
step 04_kv_cache 240 0 "python -m week5_integration.inference_bench --out '$OUT/results/week5' && tail -n 20 '$OUT/results/week5/kv_cache_week5.md'"
step 05_swaps 200 0 "python -m week5_integration.profile_model_bench --what swaps --out '$OUT/results/week5' && tail -n 15 '$OUT/results/week5/swaps_week5.md'"
step 06_finetune 420 0 "python -m week5_integration.finetune_bench --config large gpt2 --out '$OUT/results/week5' && tail -n 20 '$OUT/results/week5/finetune_week5.md'"
# one process (and two where there are two GPUs): the scale-out steps on the clock, host_bound on any rank
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${GPUS:-0}" -ge 2 ]; then
    step 07_scaleout 560 0 "python -m week5_integration.scaleout all --gpus 2 --out '$OUT/results/week5' --stage '$OUT/stage'"
else
    step 07_scaleout 300 0 "torchrun --standalone --nproc-per-node 1 -m week5_integration.scaleout run --stage '$OUT/stage' \
&& python -m week5_integration.scaleout report --stage '$OUT/stage'"
fi
echo "=== done: logs in $OUT/logs, results in $OUT/results"
