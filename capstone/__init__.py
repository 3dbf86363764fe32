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
        "capstone_text": ("python -m capstone.train --config gpt2_124m --text capstone/data/tinyshakespeare.txt "
                          "--steps 1000 --batch 8 --warmup 100 --eval-every 50 --sample-bytes 400 "
                          "--out /tmp/capstone_text --record capstone/results"),
    },
}
