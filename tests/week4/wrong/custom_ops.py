"""Known-wrong triton_op registrations the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("tanh_gelu_launched",
          "the op launches the kernel's tanh approximation while its backward differentiates the exact (erf) gelu",
          old="            fused_elementwise.bias_gelu_kernel[grid](x, bias, out, n, x.shape[-1], TANH=False, BLOCK_SIZE=block)\n",
          new="            fused_elementwise.bias_gelu_kernel[grid](x, bias, out, n, x.shape[-1], TANH=True, BLOCK_SIZE=block)\n",
          expect="elements differ", tests=("-k", "triton_op_eager")),
    Wrong("bias_gradient_of_one_row",
          "dbias is taken from the first row only, not summed over every row that added the bias",
          old="    return dh, dh.reshape(-1, x.shape[-1]).sum(0, dtype=torch.float32).to(bias.dtype)\n",
          new="    return dh, dh.reshape(-1, x.shape[-1])[0].to(bias.dtype)\n",
          expect="elements differ", tests=("-k", "triton_op_eager")),
]
