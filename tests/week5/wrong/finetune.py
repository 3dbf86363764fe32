"""Known-wrong fine-tuning pieces the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("nf4_bits_counted_as_bytes",
          "the NF4 base counted at 4.127 bytes per weight instead of 4.127 bits: QLoRA looks heavier than LoRA",
          old="        weights = nf4_bits / 8 * n[\"linear\"] + 4 * n[\"other\"] + 4 * n[\"adapters\"]\n",
          new="        weights = nf4_bits * n[\"linear\"] + 4 * n[\"other\"] + 4 * n[\"adapters\"]\n",
          expect="assert", tests=("-k", "memory_model")),
    Wrong("embedding_left_frozen",
          "the adapters alone train: the byte embedding (the new task's digits, '+' and '=') stays frozen",
          old="        model.tok.weight.requires_grad_(True)\n",
          new="        pass\n",
          expect="assert", tests=("-k", "each_variant_trains")),
    Wrong("checkpoint_closure_binds_last_block",
          "the checkpointed forward closes over the loop variable: every block runs the last block's forward",
          old="        def checkpointed(x, rope=None, cache=None, layer=0, pending=None, _forward=forward):\n",
          new="        def checkpointed(x, rope=None, cache=None, layer=0, pending=None):\n"
              "            _forward = forward\n",
          expect="elements differ|loss|grad", tests=("-k", "checkpointed_blocks")),
]
