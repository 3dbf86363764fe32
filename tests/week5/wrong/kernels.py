"""Known-wrong kernel adapters the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("norm_eps_dropped",
          "the RMSNorm adapter leaves eps out: rms_norm then takes torch's default (fp32 machine epsilon), "
          "not the model's",
          old="        return rmsnorm.rms_norm(x, (x.shape[-1],), weight, eps)\n",
          new="        return rmsnorm.rms_norm(x, (x.shape[-1],), weight)\n",
          expect="loss|grad|elements differ", tests=("-k", "test_one_swap and rmsnorm-norm")),
    Wrong("fallback_not_counted",
          "a cached call (Tq != Tk) goes to torch silently: FALLBACKS never says so",
          old="        _fallback(\"attention\", reason)\n",
          new="",
          expect="fallback|Tq != Tk|head dim|Counter", tests=("-k", "falls_back")),
    Wrong("rope_layout_bshd",
          "RoPE called with the layout \"bshd\": the model's q and k are (B, H, T, Dh), so heads are taken for "
          "positions",
          old="    return rope_module.apply_rope(q, k, cos, sin, 0, \"bhsd\")\n",
          new="    return rope_module.apply_rope(q, k, cos, sin, 0, \"bshd\")\n",
          expect="loss|grad|elements differ|cos|shape", tests=("-k", "test_one_swap and rmsnorm-rope")),
]
