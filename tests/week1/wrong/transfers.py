"""Known-wrong transfers the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("sum_never_copied_back",
          "add_gpu_with_transfers computes the sum on the device and never copies it back to `out`",
          old="    out.copy_(dout, non_blocking=pinned)\n",
          new="",
          expect="elements differ", tests=("-k", "test_gpu_add_with_transfers_matches_cpu")),
    Wrong("d2h_copies_the_wrong_way",
          "d2h copies host into device (device.copy_(host)) instead of device into host: the host "
          "buffer never receives the data",
          old="    return host.copy_(device, non_blocking=host.is_pinned())\n",
          new="    return device.copy_(host, non_blocking=host.is_pinned())\n",
          expect="elements differ", tests=("-k", "test_round_trip_is_bit_exact")),
    Wrong("host_buffer_never_pinned",
          "host_buffer ignores `pinned`: every buffer is pageable, so no copy from it is asynchronous DMA "
          "(only a GPU machine can pin memory)",
          old="    return t.pin_memory() if pinned and runtime.on_gpu() else t\n",
          new="    return t\n",
          expect="assert|pinned", tests=("-k", "test_pinned_buffers_are_page_locked"), gpu=True),
]
