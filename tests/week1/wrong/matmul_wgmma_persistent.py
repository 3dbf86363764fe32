"""Known-wrong pieces of the persistent wgmma rung the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("last_group_not_shortened",
          "persistent_tile takes every group as group_m rows tall: when the row tiles are not a multiple of "
          "group_m, the last group's tiles are split by the wrong row count and some tiles of C are never "
          "computed while others are computed twice",
          old="    rows = min(tiles_m - first_m, group_m)\n",
          new="    rows = group_m\n",
          expect="assert", tests=("-k", "test_tile_order_is_a_permutation")),
    Wrong("row_major_inside_the_group",
          "persistent_tile walks a group row by row (column = in_group % tiles_n): the tiles in flight then "
          "span whole rows of C, and with a ragged last group the order is no longer a permutation",
          old="    return first_m + in_group % rows, in_group // rows\n",
          new="    return first_m + in_group // tiles_n, in_group % tiles_n\n",
          expect="assert", tests=("-k", "test_tile_order_is_a_permutation")),
]

# Bugs of the CUDA C kernel itself (kernels/matmul_wgmma_persistent.cu; not an exercise region: these
# are the mistakes a first GPU run of such a kernel hits). Only a GPU shows them (gpu=True); on a CPU,
# tests/week1/test_matmul_wgmma_persistent.py compiles each wrong kernel with the launcher's command,
# so a fixture that no longer applies or no longer builds is seen without a GPU.
_CU = "kernels/matmul_wgmma_persistent.cu"
WRONG += [
    Wrong("cuda_last_group_not_shortened",
          "wp_tile (the kernel's tile order, an exercise hole) takes every group as group_m rows tall: with "
          "fewer row tiles than WP_GROUP_M (every shape below 2048 rows), tiles are sent below the last row "
          "of C (their stores clipped away) and whole columns of tiles are never computed: C keeps its NaN",
          old="    const int rows = min(tiles_m - first_m, group_m);\n",
          new="    const int rows = group_m;\n",
          lesson=_CU, gpu=True, expect="out of bounds|differ|assert|nan",
          tests=("-k", "test_matches_float32_reference and (129x264x72 or 1000x1000x64)")),
]
# Shapes where every stage is filled at most once per block: a barrier whose byte count is wrong then
# shows as wrong data, not a hang (over many phases the surplus bytes of one phase would pile up in
# the next ones until a phase never completes).
_FAST = ("-k", "test_matches_float32_reference and (128x256x64 or 1x8x8 or 129x264x72)")
WRONG += [
    Wrong("expect_tx_one_slab_short",
          "the full barrier expects one B slab (8 KB) less than the copies deliver: each phase completes "
          "before the stage's last slab has landed, the consumers read a stale slab of B, and the late bytes "
          "count towards the next phase",
          old="                    mbar_arrive_expect_tx(&full[s], bytes);\n",
          new="                    mbar_arrive_expect_tx(&full[s], bytes - WP_B_SLAB_BYTES);\n",
          lesson=_CU, gpu=True, expect="out of bounds|differ|assert", tests=_FAST),
    Wrong("stage_released_before_its_wgmmas_finish",
          "a consumer releases the stage it just issued wgmmas on, without waiting for them (no "
          "wgmma.wait_group before the arrive): the producer may refill the stage while the tensor cores "
          "still read it. A race: whether a run shows it depends on timing; the larger shapes make the "
          "queue of unwaited wgmmas deep enough that it does",
          old=("                wgmma_wait<1>();\n"
               "                if (kt > kt_begin && lane == 0) {\n"
               "                    mbar_arrive(&empty[(it - 1) % WP_STAGES]);\n"
               "                    if (CLUSTER > 1) mbar_arrive_remote(&empty[(it - 1) % WP_STAGES], rank ^ 1);\n"
               "                }\n"
               "            }\n"
               "            // Ping-pong: this thread has waited on every stage of the tile: the other consumer may go.\n"
               "            if (PINGPONG && tid == 0) mbar_arrive(&turn[c ^ 1]);\n"
               "            wgmma_wait<0>();\n"
               "            if (lane == 0) {  // the tile's last stage\n"
               "                mbar_arrive(&empty[(it - 1) % WP_STAGES]);\n"
               "                if (CLUSTER > 1) mbar_arrive_remote(&empty[(it - 1) % WP_STAGES], rank ^ 1);\n"
               "            }\n"),
          new=("                if (lane == 0) {\n"
               "                    mbar_arrive(&empty[it % WP_STAGES]);\n"
               "                    if (CLUSTER > 1) mbar_arrive_remote(&empty[it % WP_STAGES], rank ^ 1);\n"
               "                }\n"
               "            }\n"
               "            if (PINGPONG && tid == 0) mbar_arrive(&turn[c ^ 1]);\n"
               "            wgmma_wait<0>();\n"),
          lesson=_CU, gpu=True, expect="out of bounds|differ|assert|same_answer",
          tests=("-k", "test_matches_float32_reference and (4096x4096x4096 or 8192x50304) or test_same_answer_twice")),
    Wrong("epilogue_chunk_not_swizzled",
          "the epilogue writes its 64 x 64 chunk to shared memory row by row without the 128-byte swizzle, "
          "but the TMA store reads it swizzled (the C tensor map says SWIZZLE_128B): within each group of 8 "
          "rows the 16-byte pieces of C land in the wrong columns",
          old="                        const uint32_t offset = r * 128 + ((jj ^ (r & 7)) << 4) + 4 * (lane % 4);\n",
          new="                        const uint32_t offset = r * 128 + (jj << 4) + 4 * (lane % 4);\n",
          lesson=_CU, gpu=True, expect="out of bounds|differ|assert", tests=_FAST),
    Wrong("pingpong_without_turns",
          "the ping-pong schedule without its turn barriers: a consumer back from its epilogue waits on a "
          "stage whose full barrier is still one phase behind (the other consumer's tile, earlier in the "
          "ring, not loaded yet); that pending phase has the opposite parity, so the wait passes at once "
          "and the wgmmas read the stage's previous contents. A race (the CPU model in "
          "test_matmul_wgmma_persistent_protocol.py finds it); many tiles of 12 k steps make it likely",
          old="            if (PINGPONG && mine + c > 0) mbar_wait(&turn[c], (mine - 1 + c) & 1);\n",
          new="",
          # Besides stale reads, a consumer's early release can complete an empty barrier's phase meant for the
          # other, and a later wait then never ends: the step's first GPU run (240 s) printed no verdict, the
          # sign of a hang. hang_s cuts it (the build and 10 tests of a kernel that does not hang: ~1 minute).
          lesson=_CU, gpu=True, expect="out of bounds|differ|assert|same_answer", hang_s=150,
          tests=("-k", "pingpong and (test_matches_float32_reference and (8192x768x768 or 8192x2304x768 "
                       "or 8192x50304x768) or test_same_answer_twice or test_one_block_walks)")),
]
# Split-K (kernels/matmul_wgmma_split_k.cu builds the same body with SPLIT_K): a unit's first wgmma must start its
# sums from zero at the unit's first k step, not at k = 0.
WRONG += [
    Wrong("split_k_range_adds_the_previous_units_sums",
          "the consumer starts its accumulators from zero only at kt == 0 (accumulate = kt > 0 || kk > 0), not at "
          "the unit's first k step: every range but the first adds its partial sums to whatever the previous "
          "unit left in the registers, so the split-K sums come out too large (the plain kernel, one range from "
          "k = 0, is unaffected)",
          old="                    wgmma_ss<WP_BN, T, B_TRANS, A_TRANS>(d, desc_a, desc_b, kt > kt_begin || kk > 0);\n",
          new="                    wgmma_ss<WP_BN, T, B_TRANS, A_TRANS>(d, desc_a, desc_b, kt > 0 || kk > 0);\n",
          lesson=_CU, gpu=True, expect="out of bounds|differ|assert",
          tests=("tests/week1/test_matmul_wgmma_split_k.py", "-k", "200x328x1000-s3 or 128x256x128-s2")),
]
