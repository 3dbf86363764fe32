"""Known-wrong sum reductions the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("tree_starts_at_a_quarter",
          "the tree's first step is THREADS_PER_BLOCK // 4: the partial sums of the upper half of the "
          "block are never added in",
          old="    step = THREADS_PER_BLOCK // 2\n",
          new="    step = THREADS_PER_BLOCK // 4\n",
          expect="elements differ|sum", tests=("-k", "test_integer_valued_sums_are_exact and sum_shared_tree-257")),
    Wrong("tree_without_barrier",
          "no cuda.syncthreads() between the tree's steps: a thread reads its partner's partial sum "
          "before the partner has added into it",
          old="            partial[tid] += partial[tid + step]\n        cuda.syncthreads()\n",
          new="            partial[tid] += partial[tid + step]\n",
          expect="elements differ|sum", tests=("-k", "test_integer_valued_sums_are_exact and sum_shared_tree")),
    Wrong("non_atomic_add",
          "sum_atomic adds with out[0] += x[i]: a read-modify-write that loses updates when threads run "
          "at once (the CUDA simulator runs them one by one, so only a GPU shows it)",
          old="        cuda.atomic.add(out, 0, x[i])\n",
          new="        out[0] += x[i]\n",
          expect="elements differ|==", tests=("-k", "test_contention and sum_atomic"), gpu=True),
]
