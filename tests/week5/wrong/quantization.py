"""Known-wrong int8 quantization and matmuls the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("k_tail_unmasked",
          "the K loop loads whole BLOCK_K tiles: past K it reads the next row's weights (K not a multiple "
          "of BLOCK_K)",
          old="        q = tl.load(q_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0)\n"
              "        # Dequantize in registers",
          new="        q = tl.load(q_ptrs, mask=n_mask[None, :], other=0)\n"
              "        # Dequantize in registers",
          expect="out-of-bounds|elements differ", tests=("-k", "tails_in_every_dimension and dequant")),
    Wrong("scales_forgotten",
          "int8_matmul multiplies by the integer weights and never applies the per-channel scales",
          old="    acc = acc * scale[None, :]\n",
          new="",
          expect="elements differ", tests=("-k", "matches_float64 and not dequant")),
    Wrong("scale_from_the_row_sum",
          "the scale divides the row's absolute sum by 127 instead of its maximum: most weights round to 0",
          old="    amax = w32.abs().amax(dim=1) if w32.shape[1] else w32.new_zeros(w32.shape[0])",
          new="    amax = w32.abs().sum(dim=1) if w32.shape[1] else w32.new_zeros(w32.shape[0])",
          expect="half_a_step", tests=("-k", "half_a_step")),
]
