#!/usr/bin/env bash
# Issue 20's GPU batch, on a machine with 2 GPUs: the 2-GPU tests, week 5's DDP/FSDP runs under
# torchrun (1 GPU, then 2, with a profile), the capstone's FSDP run (1 GPU, then 2), the fine-tuning
# experiment and the LoRA / NF4 benchmarks on one GPU. Every step is logged to $OUT/logs/NN_name.log
# and timed; a failed step does not stop the next; results go to the repo's week5_integration/results
# and capstone/results, and $OUT/results.tgz always holds those folders, the logs and the per-run
# stage files (also when the budget runs out). Rank 0's profiler traces go to $OUT/traces.
#   OUT=/tmp/scaleout BUDGET_S=450 bash tools/gpu_scaleout.sh
# On the lent machine `source .devwheels/setup.sh` first (as for tools/gpu_run.sh).
# DRY_RUN=1 on a CPU: the same steps with gloo, the tiny models and a few steps, nothing saved in
# results/ (checks this script and every entry point's plumbing; its times measure Python).
set -u
OUT=${OUT:-/tmp/gpu-scaleout}
BUDGET_S=${BUDGET_S:-450}
RESERVE_S=20   # kept back for the tarball at the end
STAGE="$OUT/stage"
mkdir -p "$OUT/logs" "$OUT/traces" "$STAGE"
if [ "${DRY_RUN:-0}" = 1 ]; then
    export COURSE_BACKEND=sim
    W5="--device cpu --tiny"; CAP="--device cpu --tiny --steps 1 --warmup 1 --loss-steps 2"; ONE_GPU=""
    FT="--config tiny --pretrain-steps 3 --steps 2"; W5_OUT="/tmp/gpu-scaleout-dry"; CAP_OUT="/tmp/gpu-scaleout-dry"
else
    export COURSE_BACKEND=gpu
    W5=""; CAP=""; ONE_GPU="CUDA_VISIBLE_DEVICES=0"
    FT="--config large gpt2 --out week5_integration/results"; W5_OUT="week5_integration/results"; CAP_OUT="capstone/results"
fi
export PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COURSE_FAILURE_LOG="${COURSE_FAILURE_LOG:-$OUT/logs/failures.log}"
# NVLink multicast (NVLS) stays off (the device notes say why); every other NCCL_* variable is the machine's.
export NCCL_NVLS_ENABLE=0
TORCHRUN="python -m torch.distributed.run --standalone"
started=$(date +%s)
deadline=$(( started + BUDGET_S - RESERVE_S ))

finish() {
    [ -n "${warm_pid:-}" ] && kill "$warm_pid" 2>/dev/null
    echo "=== total $(( $(date +%s) - started )) s" | tee -a "$OUT/logs/steps.txt"
    tar czf "$OUT/results.tgz" $(ls -d week5_integration/results capstone/results 2>/dev/null) \
        -C "$OUT" logs stage
}
trap finish EXIT

{
    nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
        && nvidia-smi topo -m
    env | grep -E '^(NCCL|CUDA_VISIBLE|TORCH_NCCL)' | sort
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
} > "$OUT/logs/machine.txt" 2>&1
cat "$OUT/logs/machine.txt"

i=0
step() {  # step NAME CAP_S COMMAND: run COMMAND with at most CAP_S seconds (or what is left)
    local name=$1 cap=$2 cmd=$3
    i=$((i + 1))
    local left=$(( deadline - $(date +%s) ))
    local tag; tag=$(printf '%02d_%s' "$i" "$name")
    if [ "$left" -le 5 ]; then echo "=== [$tag] SKIPPED, out of time: $cmd" | tee -a "$OUT/logs/steps.txt"; return; fi
    local limit=$(( cap < left ? cap : left ))
    echo "=== [$tag] $cmd (limit ${limit} s, ${left} s left)" | tee -a "$OUT/logs/steps.txt"
    local t0; t0=$(date +%s)
    timeout --kill-after=10 "$limit" bash -c "$cmd" > "$OUT/logs/$tag.log" 2>&1
    local rc=$?
    echo "=== [$tag] exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/logs/steps.txt"
    grep -v -E "^\[#*\.*\]|Warning|warn|^compiled " "$OUT/logs/$tag.log" | tail -n "${TAIL:-15}"
}

# FlashAttention's autotune configs for the capstone's shape compile in the background (CPU work;
# ptxas) while the tests run; the capstone steps wait for it (at most its own 240 s).
timeout 240 python -m capstone.fsdp warm --batch 16 --procs 8 > "$OUT/logs/00_warm_attention.log" 2>&1 &
warm_pid=$!

# 1. Correctness on 2 GPUs (NCCL): week 5's strategies and the capstone's fast model against one GPU.
step tests_2gpu 180 "python -m pytest -q -rs -p no:cacheprovider tests/week5/test_multi_gpu.py tests/capstone/test_multi_gpu.py"

# 2. Week 5: the GPT2-small model, 8 x 1024 tokens per GPU; 1 GPU (single = the baseline), then 2 GPUs with a profile.
step week5_world1 120 "$TORCHRUN --nproc-per-node 1 -m week5_integration.scaleout run --stage $STAGE/week5 $W5 --strategies single ddp fsdp"
step week5_world2 180 "$TORCHRUN --nproc-per-node 2 -m week5_integration.scaleout run --stage $STAGE/week5 $W5 --profile --trace-dir $OUT/traces --strategies ddp zero1 fsdp_grad_op fsdp fsdp_bf16"
step week5_report 60 "python -m week5_integration.scaleout report --stage $STAGE/week5 --out $W5_OUT"

# 3. Capstone: the fast model, 16 x 1024 tokens per GPU; 1 GPU (baseline + the loss reference at the 2-GPU
#    global batch), then FSDP2 on 2 GPUs with a profile; the report, and summary.md's FSDP row.
echo "=== waiting for the FlashAttention warm-up (pid $warm_pid)"; wait "$warm_pid"; echo "=== warm-up exit $?"; warm_pid=
step capstone_world1 210 "$TORCHRUN --nproc-per-node 1 -m capstone.fsdp run --stage $STAGE/capstone $CAP"
step capstone_world2 180 "$TORCHRUN --nproc-per-node 2 -m capstone.fsdp run --stage $STAGE/capstone $CAP --profile --trace-dir $OUT/traces"
step capstone_report 60 "python -m capstone.fsdp report --stage $STAGE/capstone --out $CAP_OUT && { [ \"$CAP_OUT\" != capstone/results ] || python -m capstone.measure --out capstone/results --summary-only; }"

# 4. One GPU: the LoRA step at GPU-bound sizes and the NF4 dequantize kernel's bandwidth (% of a copy),
#    then the fine-tuning experiment (the 453M config, then GPT-2's shape; the record is saved after each).
step lora_nf4_bench 150 "$ONE_GPU python -m course bench week5 --only lora_step_large_week5 nf4_dequantize_week5"
step finetune 600 "$ONE_GPU python -m week5_integration.finetune_bench $FT"
