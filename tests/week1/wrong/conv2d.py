"""Known-wrong convolutions the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("naive_filter_not_centred",
          "the naive kernel reads x[row + dy, col + dx]: the filter is not centred on its pixel (the "
          "- K // 2 offset is missing), so the output is shifted by K // 2",
          old="            y = row + dy - r\n            if 0 <= y < h:  # zero padding: taps outside the image add nothing\n",
          new="            y = row + dy\n            if 0 <= y < h:  # zero padding: taps outside the image add nothing\n",
          expect="elements differ", tests=("-k", "test_matches_torch and conv2d_numba_naive")),
    Wrong("tiled_halo_missing",
          "the tiled kernel's window starts at the block's first output (by * TILE_H, bx * TILE_W) "
          "instead of K // 2 before it: the halo above and left is never loaded",
          old="        y0 = cuda.blockIdx.y * TILE_H - r  # image coordinates of tile[0, 0]\n"
              "        x0 = cuda.blockIdx.x * TILE_W - r\n",
          new="        y0 = cuda.blockIdx.y * TILE_H  # image coordinates of tile[0, 0]\n"
              "        x0 = cuda.blockIdx.x * TILE_W\n",
          expect="elements differ", tests=("-k", "test_matches_torch and conv2d_numba_tiled")),
]
