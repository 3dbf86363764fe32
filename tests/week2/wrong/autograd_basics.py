"""Known-wrong autograd exercises the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("silu_backward_without_the_product_rule",
          "silu's backward as grad * sigmoid(x): the x * sigmoid'(x) term of the product rule is lost",
          old="        return (grad_out * (s * (1 + xf * (1 - s)))).to(x.dtype)\n",
          new="        return (grad_out * s).to(x.dtype)\n",
          expect="elements differ|jacobian", tests=("-k", "matches_torch_forward_and_backward and silu")),
    Wrong("gelu_backward_chain_rule_dropped",
          "tanh-GELU's backward forgets the derivative of the cubic inside tanh: du/dx = K (1 + 3 C x^2) becomes K",
          old="        dydx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x)\n",
          new="        dydx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K\n",
          expect="elements differ|jacobian", tests=("-k", "matches_torch_forward_and_backward and gelu")),
]
