"""Known-wrong RMSNorm extensions the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("backward_mean_not_divided",
          "the C++ backward forgets to divide sum(g * xhat) by N: dx is off by the row's mean term",
          old="        const T mean = dot / T(N);\n",
          new="        const T mean = dot;\n",
          lesson="kernels/rmsnorm_ext.cu",
          expect="elements differ", tests=("-k", "cpu_version_matches_torch")),
    Wrong("partials_not_zeroed",
          "the C++ backward adds into dw_partial without zeroing it first (torch.empty holds anything)",
          old="    for (int64_t i = 0; i < P * N; ++i) dw_partial[i] = 0;\n",
          new="",
          lesson="kernels/rmsnorm_ext.cu",
          expect="elements differ", tests=("-k", "dw_partials_sum or cpu_version_matches_torch")),
    Wrong("only_the_first_partial",
          "stage two forgotten: dW is the first program's partial row, not the sum of all P rows",
          old="    return dx, partial.sum(0).to(weight.dtype)  # stage two: P rows, a small torch reduction\n",
          new="    return dx, partial[0].to(weight.dtype)\n",
          expect="elements differ", tests=("-k", "dw_partials_sum")),
]
