"""Known-wrong FlashAttention backward kernels the tests must reject (`python -m course exercises --must-fail`).

The lesson is in stages: each bug sits in one stage's holes, and only that stage's tests run on it
(`--stage N`, from the region the bug is in), so every stage's own tests are shown to catch its bugs.
"""
from classroom.must_fail import Wrong

LESSON = "attention/backward.py"  # the lesson folder's module these bugs are planted in

WRONG = [
    # stage 1: delta = rowsum(dO * O)
    Wrong("delta_product_of_row_sums",
          "delta = rowsum(O) * rowsum(dO): the sums taken before the product, not the sum of the products",
          old="    delta = tl.sum(o.to(acc_ty) * do.to(acc_ty), 1)\n",
          new="    delta = tl.sum(o.to(acc_ty), 1) * tl.sum(do.to(acc_ty), 1)\n",
          expect="delta", tests=("-k", "test_delta_is_the_row_sum_of_do_times_out")),
    Wrong("delta_products_in_fp16",
          "O * dO multiplied in the inputs' dtype (fp16) and only then widened: every product rounded to 11 bits",
          old="    delta = tl.sum(o.to(acc_ty) * do.to(acc_ty), 1)\n",
          new="    delta = tl.sum((o * do).to(acc_ty), 1)\n",
          expect="delta", tests=("-k", "test_delta_is_the_row_sum_of_do_times_out")),
    # stage 2: dK and dV of one key block
    Wrong("dk_missing_the_softmax_scale",
          "dK = dS^T Q without the scale: S = scale Q K^T, so its gradient carries the scale once",
          old="    dk = tl.where(key_ok[:, None], dk * sm_scale, 0.0)\n",
          new="    dk = tl.where(key_ok[:, None], dk, 0.0)\n",
          expect="dk", tests=("-k", "test_dkdv_of_each_key_block_match_float64")),
    Wrong("dk_without_the_delta_term",
          "dS^T = P^T * dP^T in the dK/dV kernel: the softmax Jacobian's row term delta is left out",
          old="        ds_t = p_t * (dp_t - delta[None, :])\n",
          new="        ds_t = p_t * dp_t\n",
          expect="dk", tests=("-k", "test_dkdv_of_each_key_block_match_float64")),
    Wrong("padding_keys_dv_not_zeroed",
          "dV of padding keys (past key_lengths[b]) kept: the unmasked steps gave them a nonzero sum",
          old="    dv = tl.where(key_ok[:, None], dv, 0.0)\n",
          new="    dv = dv + 0.0\n",
          expect="dv", tests=("-k", "test_dkdv_of_each_key_block_match_float64 and len22")),
    # stage 3: the causal skip
    Wrong("recomputed_p_not_masked",
          "the dK/dV kernel recomputes P = exp(s - lse) but forgets the causal mask: future queries feed dK and dV",
          old="                keep = keep & (offs_n[:, None] <= rows[None, :])\n",
          new="                keep = keep & True\n",
          expect="elements differ", tests=("-k", "test_causal_dkdv_skip_and_mask_the_right_blocks")),
    Wrong("causal_skip_off_by_one_block",
          "u_lo one query block too early: a block that straddles the diagonal runs unmasked",
          old="        u_lo = tl.cdiv(n_start + BLOCK_N - 1, BLOCK_M) * BLOCK_M\n",
          new="        u_lo = tl.cdiv(n_start + BLOCK_N - 1, BLOCK_M) * BLOCK_M - BLOCK_M\n",
          expect="elements differ", tests=("-k", "test_causal_dkdv_skip_and_mask_the_right_blocks")),
    # stage 4: dQ and the whole backward
    Wrong("dq_without_the_delta_term",
          "dS = P * dP in the dQ kernel: the softmax Jacobian's row term D = rowsum(dO * O) is left out",
          old="        ds = p * (dp - delta[:, None])\n",
          new="        ds = p * dp\n",
          expect="elements differ", tests=("-k", "test_launcher_gradients_match_float64")),
    Wrong("dq_missing_the_softmax_scale",
          "dQ stored without the scale (dQ = scale dS K)",
          old="             (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])\n",
          new="             dq.to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])\n",
          expect="dq", tests=("-k", "test_dq_alone_matches_float64")),
    # stage 5: dQ with atomics
    Wrong("atomic_dq_stored_not_added",
          "each key block's share of dQ stored instead of added: the last block to finish wins",
          old="                tl.atomic_add(dq_ptrs, dq_part, mask=rows[:, None] < seq_q)\n",
          new="                tl.store(dq_ptrs, dq_part, mask=rows[:, None] < seq_q)\n",
          expect="dq"),
    Wrong("atomic_dq_missing_the_softmax_scale",
          "each key block's share of dQ added without the scale (dQ = scale dS K)",
          old="            dq_part = dot(tl.trans(ds_t.to(k.dtype)), k, None, DOT_PRECISION) * sm_scale\n",
          new="            dq_part = dot(tl.trans(ds_t.to(k.dtype)), k, None, DOT_PRECISION)\n",
          expect="dq"),
]
