"""week2_pytorch_optimizations.memory: views vs copies, in-place and autograd, pinned memory,
the caching allocator, activation checkpointing."""
import pytest
import torch

from course import runtime
from course.check import assert_close, random_tensor

mem = runtime.lesson("week2_pytorch_optimizations.memory")
models = runtime.lesson("week2_pytorch_optimizations.models")
DEVICE = runtime.DEVICE
GPU_MEMORY = pytest.mark.gpu(reason="pinned memory, the CUDA caching allocator and max_memory_allocated exist on a GPU")


def test_views_share_storage_and_copies_do_not():
    table = mem.views_and_copies()
    views = {"view(6, 4)", "x[1:3]", "x[:, ::2]", "t()", "expand", "reshape (contiguous input)"}
    copies = {"reshape (transposed input)", "t().contiguous()", "clone", "x[[0, 2]] (index)"}
    assert {name for name, row in table.items() if row["view"]} == views
    assert {name for name, row in table.items() if not row["view"]} == copies
    assert table["t()"]["stride"] == (1, 6) and not table["t()"]["contiguous"]
    assert table["x[1:3]"]["offset"] == 6 and table["x[1:3]"]["contiguous"]
    assert table["expand"]["stride"] == (0, 1)  # stride 0: one row read four times, no copy
    assert all(table[name]["contiguous"] for name in copies)


def test_view_refuses_what_it_cannot_express():
    assert "view size is not compatible with input tensor's size and stride" in mem.view_fails_on_transposed()


def test_writing_through_a_view_changes_the_base():
    x = torch.zeros(3, 4, device=DEVICE)
    x.t()[1].fill_(7.0)
    assert_close(x[:, 1], torch.full((3,), 7.0, device=DEVICE))


def test_inplace_on_a_saved_tensor_is_caught_by_the_version_counter():
    result = mem.inplace_breaks_autograd()
    assert result["version_after"] == result["version_before"] + 1
    assert "modified by an inplace operation" in result["error"]
    assert result["grad_out_of_place"].shape == (5,)


@pytest.mark.parametrize("batch", [1, 3])
def test_checkpointing_saves_fewer_activation_bytes_and_the_same_gradients(batch):
    cfg = models.tiny(models.GPT_TINY, n_layers=3)
    x, y = models.gpt_batch(cfg, batch, DEVICE, generator=torch.Generator().manual_seed(1))
    results = {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = models.GPT(cfg, checkpoint_blocks=ckpt).to(DEVICE)
        saved = mem.saved_activation_bytes(model, x, lambda logits: models.gpt_loss(logits, y))
        model.zero_grad()
        models.gpt_loss(model(x), y).backward()
        results[ckpt] = (saved, [p.grad.clone() for p in model.parameters()])
    plain, ckpt = results[False][0], results[True][0]
    assert ckpt < 0.5 * plain, (plain, ckpt)  # per block only its input survives the forward
    for g1, g2 in zip(results[False][1], results[True][1]):
        # Recomputation runs the same kernels on the same inputs (bit-identical on the CPU);
        # on a GPU the attention backward may add in a run-dependent order: float32 defaults.
        assert_close(g2, g1)


def test_saved_activation_bytes_counts_inputs_not_weights():
    model = torch.nn.Linear(8, 8, bias=False).to(DEVICE)
    x = random_tensor((4, 8), torch.float32, DEVICE).requires_grad_(True)
    assert mem.saved_activation_bytes(model, x) == 4 * 8 * 4  # x saved for the weight's gradient


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the CPU's refusal; a GPU measures")
@pytest.mark.parametrize("fn", ["pinned_transfer_overlap", "caching_allocator_demo", "checkpointing_peak_memory"])
def test_gpu_measurements_refuse_the_cpu(fn):
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        getattr(mem, fn)()


@GPU_MEMORY
def test_pinned_copy_is_faster_and_overlaps_compute():
    r = mem.pinned_transfer_overlap()
    print(r)
    assert r["pinned_gbps"] > r["pageable_gbps"]
    # CUDA events time when each ran, so the check holds on a GPU other processes share (the
    # whole suite under xdist): wall-clock "serial minus overlapped" does not. On a side stream
    # most of the shorter interval runs inside the other; on one stream they never meet.
    assert r["event_overlap_side_stream"] > 0.5, r
    assert r["event_overlap_same_stream"] < 0.05, r


@GPU_MEMORY
def test_caching_allocator_keeps_freed_memory_until_empty_cache():
    r = mem.caching_allocator_demo(64)
    print(r)
    mib = r["mib"]  # 64, or more when earlier work left a larger free block inside a live segment
    assert mib >= 64
    assert r["allocated_reserved_mib_live"][0] == pytest.approx(mib)
    assert r["after_del"][0] == pytest.approx(0) and r["after_del"][1] >= mib  # kept for reuse
    assert r["after_empty_cache"][1] < mib


@GPU_MEMORY
def test_checkpointing_lowers_peak_memory_on_the_gpu():
    r = mem.checkpointing_peak_memory()
    print(r)
    assert r["checkpointed_mib"] < 0.6 * r["plain_mib"]
    # Same math, but cuBLAS/flash-attention may pick other algorithms when recomputing.
    assert r["grad_rel_err"] < 1e-5
