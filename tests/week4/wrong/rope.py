"""Known-wrong RoPE kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("lanes_past_half_unmasked",
          "the lanes of the power-of-two block past D/2 are not masked: they read x2 as x1 and write "
          "past the half (any head dim whose half is not a power of two)",
          old="    mask = (heads < H)[:, None] & (d < HALF)[None, :]\n",
          new="    mask = (heads < H)[:, None] & (d < BLOCK_D)[None, :]\n",
          expect="out-of-bounds|elements differ", tests=("-k", "test_forward_matches_float64")),
    Wrong("backward_rotates_forward",
          "the backward forgets that R(theta)^T = R(-theta): sin keeps its sign under INVERSE",
          old="        sin = -sin\n",
          new="        sin = sin\n",
          expect="elements differ", tests=("-k", "inverse or backward_matches")),
    Wrong("position_offset_ignored",
          "decoding with a KV cache: the new tokens are rotated as if they sat at positions 0 .. S-1",
          old="    pos = position_offset + s\n",
          new="    pos = s\n",
          expect="position_offset", tests=("-k", "position_offset")),
]
