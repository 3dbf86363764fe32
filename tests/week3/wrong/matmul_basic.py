"""Known-wrong rung 1 and 2 matmuls the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("plain_k_tail_unmasked",
          "the K loop masks rows and columns but not K: the last, short K step multiplies values past "
          "the end of A's rows and B's columns",
          old="        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)\n"
              "        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)\n"
              "        acc = tl.dot(a, b, acc)  # fp16/bf16 in",
          new="        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)\n"
              "        b = tl.load(b_ptrs, mask=offs_n[None, :] < N, other=0.0)\n"
              "        acc = tl.dot(a, b, acc)  # fp16/bf16 in",
          expect="out-of-bounds|elements differ", tests=("-k", "rungs_match_float64 and plain")),
    Wrong("last_group_full_height",
          "grouped order that takes every group to be GROUP_M rows of tiles tall: when the rows do not "
          "divide, the last group's programs compute tiles past the edge and skip real ones",
          old="    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be shorter\n",
          new="    group_size_m = GROUP_M\n",
          expect="elements differ|assert", tests=("-k", "group")),
]
