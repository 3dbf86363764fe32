"""Known-wrong Triton matmuls the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("k_tail_unmasked",
          "the K loop loads whole BLOCK_K tiles: past K it multiplies values of the next row and column",
          old="        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)\n"
              "        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)\n"
              "        acc = _dot(a, b, acc, FP8_PRECISE, BLOCK_K)\n",
          new="        a = tl.load(a_ptrs)\n"
              "        b = tl.load(b_ptrs)\n"
              "        acc = _dot(a, b, acc, FP8_PRECISE, BLOCK_K)\n",
          expect="out-of-bounds|elements differ", tests=("-k", "matmul_matches_torch")),
    Wrong("fp16_accumulator",
          "the accumulator is kept in fp16: every partial sum over K is rounded to 11 bits",
          old="    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
              "        # K is the one dimension",
          new="    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
              "        acc = acc.to(tl.float16).to(tl.float32)\n        # K is the one dimension",
          expect="elements differ", tests=("-k", "matmul_matches_torch")),
    Wrong("relu_eats_nan",
          "relu as a plain maximum: the hardware's fmax turns NaN into 0 where torch.relu keeps NaN",
          old="        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)\n",
          new="        acc = tl.where(acc > 0.0, acc, 0.0)\n",
          expect="elements differ|nan", tests=("-k", "nan_and_inf")),
]
