"""Stand-ins for week 4's Hopper attention kernels, for the CPU tests of what surrounds them (the torch ops,
their fakes and autograd, torch.compile, the capstone's adapter).

Each keeps its kernel's contract (dense 16-bit (B, H, S, D) tensors; the backward runs week 4's own checks)
and computes in float64 from the same inputs, then rounds once to the inputs' dtype, as the kernels' fp32
accumulators nearly do. `install(monkeypatch)` puts them in place of the forward's launch and the backward's
launcher, and takes this machine for an H100 in the forward's device check.
"""
import torch

from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention import hopper_backward as hb
from week4_triton_dl.attention import naive as an


def forward_stand_in(q, k, v, causal, scale, out, lse, pingpong=True, overlap=False, persistent=False, dynamic=False,
                     key_lengths=None):
    """hopper.launch without the GPU: the kernel's layout (dense q, k, v, out), then o and lse in float64
    (naive.attention_reference: top-left causal mask, Sq != Sk allowed, padding keys), written into out and lse."""
    assert all(t.is_contiguous() for t in (q, k, v, out)), "the TMA reads dense (B, H, S, D) blocks"
    o, lse_ = an.attention_reference(q, k, v, causal, scale, key_lengths=key_lengths, return_lse=True)
    return out.copy_(o), lse.copy_(lse_)


class BackwardStandIn:
    """hopper_backward.attention_hopper_backward without the GPU: its own checks, the kernels' layout, then
    dq, dk, dv in float64 from the same inputs, rounded once, fresh tensors. Counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, q, k, v, o, do, lse, causal, scale, key_lengths=None, **options):
        hb.check_inputs(q, k, v, o, do, lse, causal, scale, key_lengths)
        assert all(t.is_contiguous() for t in (q, k, v, o, do)), "the TMA reads dense (B, H, S, D) blocks"
        self.calls += 1
        # The gradients written out (a custom op's body runs below autograd: no torch.autograd.grad here).
        qd, kd, vd, dod = (t.double() for t in (q, k, v, do))
        keep = an.allowed_keys(q.shape[2], k.shape[2], causal, key_lengths, batch=q.shape[0], device=q.device)
        s = ((qd @ kd.transpose(-1, -2)) * scale).masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, dim=-1).where(keep.any(-1, keepdim=True), 0)  # a row with no key: zeros
        dp = dod @ vd.transpose(-1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        grads = (ds @ kd) * scale, (ds.transpose(-1, -2) @ qd) * scale, p.transpose(-1, -2) @ dod
        return tuple(g.to(q.dtype) for g in grads)


def install(monkeypatch) -> BackwardStandIn:
    """The kernels replaced (the forward's launch, the backward's launcher: the ops look both up at call
    time), the forward's device check passed; returns the backward's stand-in (its call count)."""
    backward = BackwardStandIn()
    monkeypatch.setattr(hp, "launch", forward_stand_in)
    monkeypatch.setattr(hp, "device_refusal", lambda device: None)
    monkeypatch.setattr(hb, "attention_hopper_backward", backward)
    return backward
