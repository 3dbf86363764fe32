"""Known-wrong Hopper attention backward kernels the tests must reject (`python -m course exercises --must-fail`).

The bugs are in the CUDA C (attention/kernels/attention_hopper_backward.cu), which the lesson module
attention/hopper_backward.py builds with load_inline; the fixture run copies that module beside a kernels/
folder holding the wrong .cu (and its PTX header), so the build, the launch and the tests are the real ones.
Every one needs an H100/H200 to show: on another machine the gradient tests skip (gpu=True). Each patched
source still compiles for sm_90a with the launcher's own nvcc command (warnings as errors): a bug that broke
the build would be caught by the compiler, not by the tests.

The dQ tile's ORDERING bugs (the issuer's cp.async.bulk.wait_group.read dropped, a warp's fence.proxy.async
dropped, the barrier before the reduce-add's issue dropped, the final wait_group dropped) are not here: each is
a race whose window the kernel's own timing almost always closes (the buffer is rewritten a whole step after
its reduce was issued; the 4 warps leave the same wgmma wait together), so the GPU tests would pass on most
runs and a must-fail fixture would be flaky. tests/week4/test_attention_hopper_backward_protocol.py catches each
of them on the CPU instead, under random interleavings. The dQ tile's LAYOUT bug below is deterministic.
"""
from classroom.must_fail import Wrong

LESSON = "attention/kernels/attention_hopper_backward.cu"  # the lesson folder's CUDA C these bugs are planted in

# From Delta's load to dS: the fixture drops both (a Delta loaded and never used would be a compiler warning).
_DS_BLOCK = """\
            const float* delta_row = delta + (size_t)bh * S_pad + m0 + col;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float2 l2 = *reinterpret_cast<const float2*>(lse_row + 8 * j);
                const float2 dl = *reinterpret_cast<const float2*>(delta_row + 8 * j);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float lj = e ? l2.y : l2.x, dj = e ? dl.y : dl.x;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int i = 4 * j + 2 * h + e;
                        float p = ex2(st[i] * c2 - lj);
                        if (masked) {
                            const int key = n0 + 64 * c + row + 8 * h, query = m0 + 8 * j + col + e;
                            if (key >= kv || (CAUSAL && key > query)) p = 0.0f;
                        }
                        st[i] = p;
                        dpt[i] = p * (dpt[i] - dj);
"""

WRONG = [
    Wrong("delta_not_subtracted",
          "dS = P * dP: the softmax Jacobian's row term Delta = rowsum(dO * O) left out (dV stays right: "
          "it needs P only; dQ and dK are off by P * Delta)",
          old=_DS_BLOCK, new=_DS_BLOCK.replace(_DS_BLOCK.splitlines(True)[0], "")
                                       .replace(_DS_BLOCK.splitlines(True)[4], "")
                                       .replace(", dj = e ? dl.y : dl.x", "")
                                       .replace("dpt[i] = p * (dpt[i] - dj);", "dpt[i] = p * dpt[i];"),
          expect=r"dq \(in units of its error bound\).*elements differ",
          tests=("-k", "test_gradients_match_float64 and 129"), gpu=True),
    Wrong("dq_added_without_atomics",
          "dQ_accum += dQ_part as a plain read-modify-write (the -DAHB_DQ_TMA=0 build's atomics): the two "
          "warpgroups of a block and every key block add into the same query rows at once, and additions are "
          "lost (a race: only a GPU shows it; the tests' dq_atomics cases run that build)",
          old="                        atomicAdd(reinterpret_cast<float2*>(dst + 8 * j), "
              "make_float2(dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]));\n",
          new="                        { float2& acc = *reinterpret_cast<float2*>(dst + 8 * j); "
              "acc.x += dq[4 * j + 2 * h]; acc.y += dq[4 * j + 2 * h + 1]; }\n",
          expect=r"dq \(in units of its error bound\).*elements differ",
          tests=("-k", "dq_atomics and (test_gradients_match_float64 and 1000 or test_many_heads)"), gpu=True),
    Wrong("causal_mask_hides_the_diagonal",
          "key >= query masked: each query loses its own key (the diagonal of the causal mask off by one), so "
          "P = 0 there and every gradient of the row is off",
          old="(CAUSAL && key > query)", new="(CAUSAL && key >= query)",
          expect=r"dq \(in units of its error bound\).*elements differ",
          tests=("-k", "test_gradients_match_float64 and causal and 129"), gpu=True),
    Wrong("dq_tile_stored_unswizzled",
          "the dQ tile stored row-major while its tensor map (and so the TMA reduce-add) reads it 128-byte "
          "swizzled: in every row r with r % 8 != 0 the 16-byte chunks land permuted, so dQ's columns are "
          "added into the wrong places (dK and dV stay right)",
          old="                uint32_t key = (row & 7) ^ (col / 4);\n",
          new="                uint32_t key = col / 4;\n",
          expect=r"dq \(in units of its error bound\).*elements differ",
          tests=("-k", "test_gradients_match_float64 and 129 and dq_tma"), gpu=True),
]
