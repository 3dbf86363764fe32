"""Known-wrong stream pipelines the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("chunks_not_aligned",
          "the chunk size is ceil(n / chunks) without rounding up to `align`: chunks start mid-way "
          "through a 256-byte line",
          old="    size = math.ceil(math.ceil(n / chunks) / align) * align\n",
          new="    size = math.ceil(n / chunks)\n",
          expect="aligned", tests=("-k", "test_chunks_cover_the_range_exactly")),
    Wrong("copy_back_before_compute",
          "the serial pipeline copies the device result back before the computation that writes it: "
          "`out` receives whatever the workspace held",
          old="    busy_add_reference(da, db, iters, out=dout)\n    out.view(-1).copy_(dout, non_blocking=pinned)\n",
          new="    out.view(-1).copy_(dout, non_blocking=pinned)\n    busy_add_reference(da, db, iters, out=dout)\n",
          expect="elements differ", tests=("-k", "test_torch_serial_pipeline_matches_reference")),
]
