"""Known-wrong SwiGLU gradients the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("silu_derivative_is_sigmoid",
          "d silu(a) / da taken as sigmoid(a): the a s (1 - s) term of the product rule is dropped, so the "
          "gate's gradient is wrong wherever the gate is not near 0",
          old="    return torch.cat([g32 * (s * (1 + gate * (1 - s))) * up, g32 * (gate * s)], dim=-1).to(g.dtype)\n",
          new="    return torch.cat([g32 * s * up, g32 * (gate * s)], dim=-1).to(g.dtype)\n",
          expect="out of bounds", tests=("-k", "test_backward_formulas_match_float64")),
    Wrong("gate_and_up_swapped",
          "h's halves taken the other way round (up first): the gradients go to the wrong weights' rows",
          old="    gate, up = h.float().chunk(2, dim=-1)\n",
          new="    up, gate = h.float().chunk(2, dim=-1)\n",
          expect="out of bounds", tests=("-k", "test_backward_formulas_match_float64")),
]
