"""Known-wrong pieces of the Hopper rung's kernel (kernels/matmul_wgmma.cu: the producer's loop and the
consumers' k loop, its exercise holes) the tests must reject (`python -m course exercises --must-fail`).

Only a GPU runs them (gpu=True). On a CPU, tests/test_cuda_sources.py builds each wrong kernel with the
launcher's command (warnings as errors), so a fixture that no longer applies or no longer builds shows
without a GPU. None of them can hang: every barrier still completes (a wrong byte count only on shapes
whose stages are each filled once per block, `_ONE_PASS`), so each shows as wrong data.
"""
from classroom.must_fail import Wrong

LESSON = "kernels/matmul_wgmma.cu"
# K <= 4 stages of 64: each stage is filled at most once, so a phase whose byte count is wrong shows as
# stale data, not as surplus bytes piling up into later phases until one never completes (a hang).
_ONE_PASS = ("-k", "test_wgmma_tiles_and_tails and (128x256x64 or 129x257x65)")
_ALL_SIZES = ("-k", "test_wgmma_tiles_and_tails")

WRONG = [
    Wrong("b_box_coordinates_swapped",
          "the TMA copy of B's slab gets its coordinates as (row, column) = (k, n): a tensor map's box is "
          "addressed (x = column, y = row), innermost first, so every stage holds the wrong 64 x 64 piece of B",
          old=("                        tma_load_2d(a_dst + WG_A_BYTES + j * WG_B_SLAB_BYTES, &map_b, &full[s],\n"
               "                                    n0 + j * WG_B_SLAB, t * WG_BK);\n"),
          new=("                        tma_load_2d(a_dst + WG_A_BYTES + j * WG_B_SLAB_BYTES, &map_b, &full[s],\n"
               "                                    t * WG_BK, n0 + j * WG_B_SLAB);\n"),
          lesson=LESSON, gpu=True, expect="out of bounds|differ|assert", tests=_ALL_SIZES),
    Wrong("expect_tx_counts_a_alone",
          "the full barrier is armed with A's 16 KB only: each phase completes as soon as A has landed, "
          "before B's slabs have, and the consumers' wgmmas read whatever the stage held before (a race the "
          "copy engine loses almost always: B's 32 KB come after A's 16 KB)",
          old="                mbar_arrive_expect_tx(&full[s], WG_A_BYTES + b_slabs * WG_B_SLAB_BYTES);\n",
          new="                mbar_arrive_expect_tx(&full[s], WG_A_BYTES);\n",
          lesson=LESSON, gpu=True, expect="out of bounds|differ|assert", tests=_ONE_PASS),
    Wrong("k_step_counted_in_elements",
          "the A descriptor steps 16 bytes per 16-wide k slice, as if the offset counted elements: 16 k of "
          "fp16 are 32 bytes along each 128-byte row, so the wgmmas read half-overlapping slices of A and "
          "the last 32 k of every stage never",
          old="                const uint64_t desc_a = smem_desc(a_base + kk * 32, 16, 1024);\n",
          new="                const uint64_t desc_a = smem_desc(a_base + kk * 16, 16, 1024);\n",
          lesson=LESSON, gpu=True, expect="out of bounds|differ|assert", tests=_ALL_SIZES),
    Wrong("stage_released_before_its_wgmmas_finish",
          "a consumer releases the stage it just issued wgmmas on, without waiting for them (no wait_group "
          "before the arrive): the producer may refill the stage while the tensor cores still read it. A race: "
          "the long K (4100: 65 k tiles through 4 stages) gives it many chances",
          old=("            wgmma_wait<1>();\n"
               "            if (t > 0 && lane == 0) mbar_arrive(&empty[(t - 1) % WG_STAGES]);\n"),
          new="            if (lane == 0) mbar_arrive(&empty[t % WG_STAGES]);\n",
          lesson=LESSON, gpu=True, expect="out of bounds|differ|assert|same_answer",
          tests=("-k", "test_wgmma_tiles_and_tails and (7x600x4100 or 300x520x1000) or test_wgmma_same_answer_twice")),
]
