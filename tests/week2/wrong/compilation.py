"""Known-wrong compilation probes the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("traced_on_the_wrong_example",
          "the trace is recorded on the negative input: it freezes the other branch and the bug hides",
          old="        traced = torch.jit.trace(branchy, (pos,))\n",
          new="        traced = torch.jit.trace(branchy, (neg,))\n",
          expect="trace_freezes", tests=("-k", "trace_freezes")),
    Wrong("dynamo_not_reset",
          "torch._dynamo.reset() forgotten between runs: compiles from earlier calls are counted or reused",
          old="    torch._dynamo.reset()\n    compiled = torch.compile(fn, backend=counting_backend, dynamic=dynamic)\n",
          new="    compiled = torch.compile(fn, backend=counting_backend, dynamic=True)\n",
          expect="recompiles", tests=("-k", "recompiles")),
]
