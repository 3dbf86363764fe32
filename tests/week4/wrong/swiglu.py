"""Known-wrong SwiGLU kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("derivative_of_sigmoid_forgotten",
          "da treats sigmoid(a) as a constant: dy * b * s, without the (1 + a (1 - s)) of silu's derivative",
          old="    da = (dy * (s * (1.0 + a * (1.0 - s)))) * b\n",
          new="    da = (dy * s) * b\n",
          expect="elements differ", tests=("-k", "backward_matches_float64")),
    Wrong("silu_product_overflows",
          "db = (dy * a) * s: for a large negative gate, dy * a overflows to inf and inf * 0 is NaN",
          old="    tl.store(db_ptr + rows * stride_db + cols, (dy * (a * s)).to(db_ptr.dtype.element_ty), mask=mask)\n",
          new="    tl.store(db_ptr + rows * stride_db + cols, ((dy * a) * s).to(db_ptr.dtype.element_ty), mask=mask)\n",
          expect="nan|elements differ", tests=("-k", "large_negative_gate or nan_and_inf")),
]
