"""Known-wrong cross-entropy kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("ticket_counter_never_reset",
          "the last program of the one-launch reduction does not set the counter back to 0: the next call on "
          "the stream never has a program that draws the last ticket, so its loss is never written",
          old='        tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")  # ready for the next call on this stream\n',
          new="",
          expect="ticket counter", tests=("-k", "test_one_launch_reduction_is_reusable")),
    Wrong("ignored_rows_counted",
          "the reduction counts every row in range, ignored ones too: the mean divides by too many rows",
          old="        count += tl.where(t != ignore_index, 1.0, 0.0)\n",
          new="        count += tl.where(mask, 1.0, 0.0)\n",
          expect="loss|differ", tests=("-k", "test_reductions_on_both_paths")),
    Wrong("loss_from_unshifted_logits",
          "the loss is lse - x_t with lse = m + log d rebuilt first: near 1e4 the subtraction of two large, "
          "nearly equal numbers loses the digits the loss is made of",
          old="        loss = log_sum - t_shift\n",
          new="        loss = (row_max + log_sum) - x_t\n",
          expect="differ|loss", tests=("-k", "test_cross_entropy_at_logits_near_1e4")),
]
