"""Known-wrong Hopper attention forward kernels the tests must reject (`python -m course exercises --must-fail`).

The bugs are in the CUDA C (attention/kernels/attention_hopper_forward.cu), which the lesson module
attention/hopper.py builds with load_inline; the fixture run copies that module beside a kernels/ folder
holding the wrong .cu (and its PTX header), so the build, the launch and the tests are the real ones. Each
bug sits in one of the kernel's exercise holes. Every one needs an H100/H200 to show: on another machine the
GPU tests skip (gpu=True). Each patched source still compiles for sm_90a with the launcher's own nvcc command
(warnings as errors, tests/test_cuda_sources.py): a bug that broke the build would be caught by the
compiler, not by the tests.

Which are certain: the missing rescale and the hidden diagonal are wrong on every launch the selected tests
make (deterministic). The early release is a race: whether the producer's next TMA copy lands in a slot
before the wgmma still reading it has finished depends on timing. The selected tests give it many chances
(the lengths of 8 and 17 key tiles, and a same-bits-four-times check at 12 tiles x 16 (batch, head) pairs x
12 query tiles): the ring slot of V is refilled while the second warpgroup's P V, queued behind its own
S = Q K^T and the other warpgroup's GEMMs, has yet to read it. Only a GPU run says how reliably.

The selections leave out the overlap build's tests (-DAH_INTRA_OVERLAP=1, `-k overlap`): its middle phase is
given code, not a hole, so no fixture may be planted there (classroom/must_fail.py: a learner never writes it);
tests/week4/test_attention_hopper_forward_protocol.py's model plants its wrong orders instead.
"""
from classroom.must_fail import Wrong

LESSON = "attention/kernels/attention_hopper_forward.cu"  # the lesson folder's CUDA C these bugs are planted in

# The end of a consumer's GEMM phase: wait for its wgmmas, then free the slots they read.
_WAIT = """\
        wgmma_wait<0>();
        fence_regs(s);
        fence_regs(o);
"""
_RELEASE = """\
        // Both GEMMs have read their slots: give them back to the producer (one arrive per warp).
        if (lane == 0) {
            if (HAS_S) mbar_arrive(&empty_k[s_slot]);
            if (HAS_PV) mbar_arrive(&empty_v[pv_slot]);
        }
"""

# The overlap build's end of a middle phase (its own hole): the wait for P V, then its V slot released.
_PV_WAIT = """\
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(s);  // the pack below reads s: fenced here, it cannot move above the wait
    if (lane == 0) mbar_arrive(&empty_v[pv_slot]);  // P V has read its V slot
"""
_PV_RELEASED_EARLY = """\
    if (lane == 0) mbar_arrive(&empty_v[pv_slot]);  // P V has read its V slot
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(s);  // the pack below reads s: fenced here, it cannot move above the wait
"""

_RESCALE = """\
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            o[4 * j + 2 * h] *= alpha;
            o[4 * j + 2 * h + 1] *= alpha;
        }
"""

# The persistent build's producer (its own hole): before the next work tile's Q, wait until both consumers are done
# with the one Q slot.
_Q_EMPTY_WAIT = "                if (round > 0) mbar_wait(&empty_q, (round - 1) & 1);\n"

# The slot-release races: timing decides whether a GPU run shows them, so each also names the CPU protocol model's
# source-tie test, which rejects the wrong order on any machine (verdict 'model').
_RACE_MODEL = dict(model=("tests/week4/test_attention_hopper_forward_protocol.py", "-k", "follows_the_source"),
                   model_expect="order is not the model's")

WRONG = [
    Wrong("slot_released_before_wgmma_wait",
          "the K/V ring slots given back to the producer (empty barriers arrived on) right after the commit, "
          "before wgmma_wait<0>(): the wgmmas may still be reading K and V when the next TMA copy overwrites "
          "the slot (a race: only a GPU shows it, as wrong or run-to-run different results)",
          old=_WAIT + _RELEASE, new=_RELEASE + _WAIT,
          expect=r"elements differ|torch\.equal",
          tests=("-k", "((test_matches_float64 and 1000) or test_explicit_scale_and_long_sequence "
                       "or test_same_answer_twice) and not overlap and not persistent"), gpu=True,
          **_RACE_MODEL),
    Wrong("output_not_rescaled",
          "O += P V accumulated under the old running max: alpha = 2^(m_old - m_new) rescales the row sum l "
          "but not the O registers, so every row whose max grows in a later key tile is off",
          old=_RESCALE, new="",
          expect=r"out \(in units of its error bound\).*elements differ",
          tests=("-k", "test_matches_float64 and 1000 and not overlap and not persistent"), gpu=True),
    Wrong("causal_mask_hides_the_diagonal",
          "key >= query masked: each query loses its own key (the diagonal of the causal mask off by one): "
          "query 0 sees no key at all (0 / 0), every other row's softmax is off",
          old="(causal && col > row0 + 8 * h)) s[", new="(causal && col >= row0 + 8 * h)) s[",
          expect=r"out \(in units of its error bound\).*elements differ",
          tests=("-k", "test_matches_float64 and causal and 129 and not overlap and not persistent"), gpu=True),
    Wrong("overlap_v_slot_released_under_pv",
          "the overlap build gives the V slot back before waiting for the P V group (wait<0>): the tensor cores "
          "may still be reading V when the producer's next TMA copy overwrites the slot (a race: only a GPU "
          "shows it, as wrong or run-to-run different results; the CPU protocol model rejects the order)",
          old=_PV_WAIT, new=_PV_RELEASED_EARLY,
          expect=r"elements differ|torch\.equal",
          tests=("-k", "overlap and not persistent and ((test_matches_float64 and 1000) or test_same_answer_twice "
                       "or test_overlap_same_bits)"), gpu=True,
          **_RACE_MODEL),
    Wrong("persistent_q_overwritten_before_release",
          "the persistent build's producer loads the next work tile's Q without waiting on empty_q: it runs ahead of "
          "the consumers by the K/V ring, so the copy lands in the one Q slot while S = Q K^T of the previous tile "
          "still reads it (wrong scores for every block that runs two work tiles or more; the CPU protocol model "
          "rejects it too). The dynamic scheduler's builds share the wait (it also guards their tile mailbox): "
          "`-k persistent` selects their tests as well",
          old=_Q_EMPTY_WAIT, new="",
          expect=r"elements differ|torch\.equal",
          tests=("-k", "persistent and (test_persistent_scheduler_shapes or test_persistent_same_bits)"), gpu=True,
          model=("tests/week4/test_attention_hopper_persistent_protocol.py", "-k", "follows_the_source"),
          model_expect="order is not the model's"),
]
