"""Known-wrong training-loop pieces the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("warmup_starts_at_zero",
          "the warm-up's first step gets lr 0 (step / warmup instead of (step + 1) / warmup): a wasted step",
          old="        return tc.lr * (step + 1) / tc.warmup\n",
          new="        return tc.lr * step / tc.warmup\n",
          expect="learning_rate", tests=("-k", "learning_rate")),
    Wrong("norm_gains_decayed",
          "weight decay on every parameter, norm gains and biases included: it pulls the gains towards 0",
          old="    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]\n"
              "    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]\n",
          new="    decay = [p for p in model.parameters() if p.requires_grad]\n"
              "    no_decay = []\n",
          expect="weight_decay", tests=("-k", "weight_decay")),
    Wrong("clipping_skipped",
          "the global norm is measured but the gradients are never clipped to tc.grad_clip",
          old="            norm = torch.nn.utils.clip_grad_norm_(params, tc.grad_clip, foreach=True)\n",
          new="            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))\n",
          expect="clipping", tests=("-k", "clipping")),
    Wrong("zero_grad_forgotten",
          "the step never zeroes the gradients: each backward adds to the previous steps' .grad",
          old="        opt.zero_grad(set_to_none=True)\n        with torch.autocast",
          new="        with torch.autocast",
          expect="after 3 steps", tests=("-k", "fresh_gradients")),
]
