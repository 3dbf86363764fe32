"""Known-wrong data-parallel pieces the tests must reject (`python -m course exercises --must-fail`).

Only code the test process itself runs can be planted here: the strategies run in spawned workers,
which import the lesson by name (the real file), so a bug in `wrap_model` or the loss all-reduce is seen by
`pytest tests/week5/test_distributed.py --impl=exercises` on a learner's stub but not by these runs.
"""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("every_stage_divided_by_world",
          "the whole model state divided by the world size at every stage: DDP (stage 0) shards nothing",
          old="    return params * (total - sharded + sharded / world)\n",
          new="    return params * total / world\n",
          expect="approx", tests=("-k", "zero_memory")),
    Wrong("zero3_gathers_once",
          "ZeRO-3 counted with one all-gather: the weights are gathered again for the backward",
          old="    gathers = 2 if stage == 3 else 1\n",
          new="    gathers = 1\n",
          expect="approx", tests=("-k", "communication_bytes")),
    Wrong("every_rank_takes_the_whole_batch",
          "shard_batch returns the global batch: every rank trains on all of it (twice the work, and the "
          "shard means are all the same)",
          old="    rows = x.shape[0] // world\n"
              "    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]\n",
          new="    return x, y\n",
          expect="torch.equal|assert", tests=("-k", "shard_batch")),
]
