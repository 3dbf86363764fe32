"""Known-wrong NF4 kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("nibbles_swapped",
          "the kernel reads the even element from the LOW nibble, the order pack_codes does not use",
          old="    code = (byte >> ((1 - (idx & 1)) * 4)) & 0xF  # even element: high nibble\n",
          new="    code = (byte >> ((idx & 1) * 4)) & 0xF\n",
          expect="elements differ", tests=("-k", "dequantize_kernel_matches_torch")),
    Wrong("one_scale_per_program",
          "the dequantize kernel takes the first block's scale for all its 1024 elements (offs >> 6 forgotten)",
          old="    scale = _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean, offs >> 6, mask, DOUBLE_QUANT)\n",
          new="    scale = _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean,"
              " (tl.program_id(0) * BLOCK_SIZE + offs * 0) >> 6, mask, DOUBLE_QUANT)\n",
          expect="elements differ", tests=("-k", "dequantize_kernel_matches_torch")),
]
