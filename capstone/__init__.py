"""The capstone: a GPT-2-small-sized model trained and served with the course's own kernels."""

# What the course's kit knows of this package (course/weeks.py reads it without importing it): its
# name and place, and the commands that write its results records (not `course bench`).
COURSE = {
    "short": "capstone",
    "title": "A GPT-2-small-sized model trained and served with the course's own kernels",
    "order": 6,
    "runners": {
        "capstone_train": "python -m capstone.measure --out capstone/results",
        "capstone_decode": "python -m capstone.measure --out capstone/results",
        "capstone_fsdp": "python -m capstone.fsdp all --gpus 2 --out capstone/results",
        # the fused roads' graphed steps profiled beside the twin's (summary.py's "what limits the fused roads"):
        # their own run folder, its fused_roads.md copied up to where the README's block reads it
        "fused_roads": ("python -m capstone.measure --out capstone/results/fused_roads --phases train --budget-s 480 "
                        "--variants torch torch.compile torch.compile+cudagraphs fast+compile+cudagraphs "
                        "fused_gemms+compile+cudagraphs wgmma_gemms+compile+cudagraphs "
                        "&& cp capstone/results/fused_roads/fused_roads.md capstone/results/"),
        "capstone_text": ("python -m capstone.train --config gpt2_124m --text capstone/data/tinyshakespeare.txt "
                          "--steps 1000 --batch 8 --warmup 100 --eval-every 50 --sample-bytes 400 "
                          "--out /tmp/capstone_text --record capstone/results"),
    },
}
