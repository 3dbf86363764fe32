"""Known-wrong LoRA layers the tests must reject (`python -m course exercises --must-fail`).
The kernels' own known-wrong versions: lora_kernels.py beside this file."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("dropout_in_eval",
          "the adapter input is dropped out in eval mode too: an evaluated model is no longer deterministic",
          old="        x_in = F.dropout(x, self.dropout, training=True) if self.dropout and self.training else None\n",
          new="        x_in = F.dropout(x, self.dropout, training=True) if self.dropout else None\n",
          expect="differ", tests=("-k", "test_dropout_is_the_same_in_both_kernels_and_off_in_eval")),
    Wrong("base_not_frozen",
          "apply_lora swaps the layers but leaves every base weight trainable: full fine-tuning with extra steps",
          old="    freeze_all_but(model, is_adapter)\n",
          new="",
          expect="assert", tests=("-k", "test_apply_lora_trains_only_the_adapters")),
]
