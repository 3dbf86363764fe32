"""Week 5: integration: profile a real model, swap in kernels, CUDA extensions, inference, scale-out."""

# What the course's kit knows of this week (course/weeks.py reads it without importing the week):
# its name and place, and the results records its lessons' own command lines write (not
# `course bench`): the command `python -m course report` names where one is missing.
COURSE = {
    "short": "week5",
    "title": "Integration: profile a real model, swap in kernels, extensions, inference, scale-out",
    "order": 5,
    "runners": {
        "profile_week5": "python -m week5_integration.profile_model_bench --out week5_integration/results",
        "swaps_week5": "python -m week5_integration.profile_model_bench --out week5_integration/results",
        "compile_reading_week5": "python -m week5_integration.compile_reading --out week5_integration/results",
        "kv_cache_week5": "python -m week5_integration.inference_bench --out week5_integration/results",
        "finetune_week5": "python -m week5_integration.finetune_bench --config large gpt2 --out week5_integration/results",
        "fsdp_week5": "python -m week5_integration.distributed_bench --gpus 2 --out week5_integration/results",
    },
}
