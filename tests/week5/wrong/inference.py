"""Known-wrong decode steps and cost models the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("new_token_masked_out",
          "the attention mask hides the key just written: the new token cannot attend to itself (< for <=)",
          old="        visible = self.key_positions <= self.pos\n",
          new="        visible = self.key_positions < self.pos\n",
          expect="static_decoder", tests=("-k", "static_decoder_steps_equal")),
    Wrong("new_kv_write_not_counted",
          "the cost model reads the cache but forgets the one K and V written per step",
          old="    return weights_read_per_step(cfg, batch) * itemsize + kv * context + kv\n",
          new="    return weights_read_per_step(cfg, batch) * itemsize + kv * context\n",
          expect="decode_step_bytes", tests=("-k", "decode_step_bytes")),
]
