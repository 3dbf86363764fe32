"""NF4, the data type: QLoRA's 4-bit NormalFloat levels, block-wise scales, double quantization, packing.

The format that nf4.py's kernels read and its QLoRA layer stores, in torch: the levels derived
(`nf4_code_table`) and published (`NF4_TABLE`), the paper's reference quantizer, and the storage
(`NF4Weight`: packed codes, double-quantized scales; `nf4_quantize`, `nf4_dequantize_torch`).

The data type. Pre-trained weights are close to normally distributed. A k-bit quantile quantizer
puts its 2^k levels at quantiles of the data's distribution, so every level is used equally often:
the information-theoretically optimal code for that distribution (each code carries the full k
bits). NF4 does this once for N(0, 1) and then normalizes: a block of 64 weights is divided by its
absolute maximum (absmax) so it lies in [-1, 1], and the 16 levels are N(0, 1) quantiles scaled so
the outermost is +-1. To represent 0 exactly (padding, zero weights, and a symmetric grid around
it), the paper builds it asymmetrically: 8 levels from the positive half, 7 from the negative half
and an exact 0 (`nf4_code_table` derives them; `NF4_TABLE` is the published table).

Block-wise quantization (block 64): absmax_b = max |w| over the block; code = nearest level to
w / absmax_b; dequant w' = NF4_TABLE[code] * absmax_b. Two codes per byte (the first element of
each pair in the high nibble, as bitsandbytes packs them).

Double quantization (the paper's section 3): the fp32 absmax constants cost 32 / 64 = 0.5 bits
per parameter. QLoRA quantizes them again with 8 bits in blocks of 256, after subtracting their
mean (they are all positive; centred, a symmetric grid fits them): 8 / 64 + 32 / (64 * 256) =
0.127 bits per parameter, saving 0.373. The paper stores them as 8-bit floats (bitsandbytes'
dynamic map); here they are 8-bit integers on a linear grid (step = block absmax / 127), so the
error bound is one line: |absmax' - absmax| <= step / 2, ~0.2% of a scale, far below NF4's own
error, and the kernels need no second lookup table. Bits per parameter: 4 + 0.127 = 4.127.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course import validate

# The 16 NF4 levels, as published (QLoRA, appendix E; bitsandbytes' NF4 map), float32 values.
NF4_TABLE_VALUES = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)
NF4_TABLE = torch.tensor(NF4_TABLE_VALUES, dtype=torch.float32)
# The outermost probability of the quantile construction, as bitsandbytes uses it. Numerically it is
# the mean of 1 - 1/32 and 1 - 1/30: the centre of the last of 16 (positive side) or of 15
# (negative side) equal-probability bins.
NF4_OFFSET = 0.9677083
BLOCK = 64          # weights per absmax scale
DQ_BLOCK = 256      # scales per second-level (fp32) scale
DQ_LEVELS = 127     # int8 grid of the centred scales: -127..127
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MAX_NUMEL = 2**31 - 2**16  # int32 element offsets in the kernels, with room for one block past the end


# --------------------------------------------------------------------------- the data type
def nf4_code_table(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The NF4 levels from their definition (float64): N(0,1) quantiles, normalized, exact zero.

    Positive half: 8 quantiles at probabilities evenly spaced from `offset` down to (not
    including) 0.5; negative half: 7 such quantiles, negated; plus 0. Dividing by the largest
    (the quantile at `offset`) puts the outermost levels at -1 and +1.
    """
    # BEGIN EXERCISE: 8 positive quantiles: torch.special.ndtri(linspace(offset, 0.5, 9)[:-1]) (float64); 7
    #   negative: -ndtri(linspace(offset, 0.5, 8)[:-1]); add 0; sort; divide by the max.
    # HINT: NF4's 16 levels are quantiles of a standard normal (weights are roughly normal), asymmetric so
    #   that exact 0 is a level: 8 on the positive side, 7 on the negative, and 0.
    # HINT: ndtri (the inverse normal CDF) of probabilities from linspace(offset, 0.5, ...) with the last
    #   point (0.5, i.e. 0) dropped: 9 points for the positive half, 8 for the negative (negated);
    #   concatenate with a zero, sort, normalize by the max, all in float64.
    # HINT: `torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])`
    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    levels = torch.cat((negative, torch.zeros(1, dtype=torch.float64), positive)).sort().values
    return levels / levels.max()
    # END EXERCISE


def nf4_midpoints(table: torch.Tensor = NF4_TABLE) -> torch.Tensor:
    """The 15 decision boundaries between neighbouring levels: nearest level = bucket index."""
    return (table[1:] + table[:-1]) / 2


# ------------------------------------------------------------------ the reference, from the paper
def nf4_reference_quantize(weight: torch.Tensor, block: int = BLOCK):
    """(codes int64 (n,), absmax float64 (blocks,)): the paper's block-wise NF4, in float64.

    Straight from the definition: flatten, split into blocks of `block`, divide by each block's
    absmax, take the nearest NF4 level (ties to the lower one, as argmin does). A trailing partial
    block is padded with zeros (which change no absmax).
    """
    flat = weight.detach().reshape(-1).double()
    n = flat.numel()
    padded = torch.zeros(-(-n // block) * block, dtype=torch.float64, device=flat.device)
    padded[:n] = flat
    blocks = padded.view(-1, block)
    absmax = blocks.abs().amax(dim=1)
    normalized = blocks / torch.where(absmax > 0, absmax, torch.ones_like(absmax))[:, None]
    table = NF4_TABLE.double().to(flat.device)
    codes = (normalized[..., None] - table).abs().argmin(dim=-1)
    return codes.reshape(-1)[:n], absmax


def nf4_reference_dequantize(codes, absmax, shape, block: int = BLOCK) -> torch.Tensor:
    """float64 weights from `nf4_reference_quantize`'s codes and scales."""
    table = NF4_TABLE.double().to(codes.device)
    n = codes.numel()
    scales = absmax.double().repeat_interleave(block)[:n]
    return (table[codes] * scales).reshape(shape)


def nf4_reference_double_quantize(absmax, block: int = DQ_BLOCK):
    """(q int64, step float64 per block, mean float64): the centred scales on a linear 8-bit grid."""
    c = absmax.double()
    mean = c.mean() if c.numel() else c.new_zeros(())
    centred = c - mean
    padded = torch.zeros(-(-c.numel() // block) * block, dtype=torch.float64, device=c.device)
    padded[:c.numel()] = centred
    step = padded.view(-1, block).abs().amax(dim=1) / DQ_LEVELS
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round(padded.view(-1, block) / safe[:, None]).reshape(-1)[:c.numel()]
    return q.long(), step, mean


# ------------------------------------------------------------------------- the storage format
@dataclass
class NF4Weight:
    """A weight in NF4: packed codes plus its scales (plain or double-quantized), and its shape.

    packed: uint8 (ceil(n / 2),), two codes per byte, the even element in the high nibble.
    double_quant=False: absmax float32 (blocks,).
    double_quant=True: absmax_q int8 (blocks,), absmax_step float32 (ceil(blocks / 256),),
    absmax_mean float32 (1,): absmax = absmax_q * absmax_step[block // 256] + absmax_mean.
    """
    packed: torch.Tensor
    shape: tuple
    double_quant: bool
    absmax: torch.Tensor | None = None
    absmax_q: torch.Tensor | None = None
    absmax_step: torch.Tensor | None = None
    absmax_mean: torch.Tensor | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def device(self):
        return self.packed.device

    def tensors(self) -> dict:
        names = ("absmax_q", "absmax_step", "absmax_mean") if self.double_quant else ("absmax",)
        return {"packed": self.packed, **{name: getattr(self, name) for name in names}}

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def bits_per_parameter(self) -> float:
        return 8 * self.nbytes / max(self.numel, 1)

    def block_scales(self) -> torch.Tensor:
        """The per-64 absmax as the kernels use it (float32; dequantized if double-quantized)."""
        if not self.double_quant:
            return self.absmax
        step = self.absmax_step.repeat_interleave(DQ_BLOCK)[:self.absmax_q.numel()]
        # Rounded once, as the kernels' tl.fma rounds: q * step is exact in float64 (8 x 24 bits),
        # so the float64 sum rounded to float32 is the FMA's result (two float32 roundings, as
        # q.float() * step + mean gives, differ from it in the last bit).
        return (self.absmax_q.double() * step.double() + self.absmax_mean).float()


def bits_per_parameter(double_quant: bool, numel: int | None = None) -> float:
    """4-bit codes + the scales' bits per weight; the large-tensor limit when numel is None."""
    # BEGIN EXERCISE: numel None: 4 + 8/64 + 32/(64*256) (double_quant) or 4 + 32/64. Else count bytes:
    #   ceil(n/2) codes + per block of 64 one fp32 (or one int8, plus 4 bytes per 256 blocks and 4 for the
    #   mean).
    # HINT: Storage cost per weight: 4 bits of code plus the scales' bits spread over their block of 64
    #   (double quantization makes each scale 8 bits, plus an fp32 step per 256 scales).
    # HINT: Without numel return the large-tensor limit; with it count bytes exactly: ceil(n / 2) code
    #   bytes, number of blocks = ceil(n / 64), then either 4 bytes per block, or 1 byte per block + 4 per
    #   group of 256 blocks + 4 for the mean; convert to bits per element.
    # HINT: Ceil division in integers: `-(-numel // BLOCK)`.
    if numel is None:
        return 4 + (8 / BLOCK + 32 / (BLOCK * DQ_BLOCK) if double_quant else 32 / BLOCK)
    blocks = -(-numel // BLOCK)
    scale_bytes = blocks + 4 * -(-blocks // DQ_BLOCK) + 4 if double_quant else 4 * blocks
    return 8 * (-(-numel // 2) + scale_bytes) / numel
    # END EXERCISE


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per uint8 (an odd count gets a zero code at the end)."""
    # BEGIN EXERCISE: pad to even; (codes[0::2] << 4) | codes[1::2] as uint8.
    # HINT: Two 4-bit codes fit one byte: the even element goes in the high nibble, the odd one in the low
    #   nibble; an odd count needs one padding code.
    # HINT: Append a zero code if the count is odd; reshape to (-1, 2) as uint8; shift the first column left
    #   by 4 and OR the second.
    if codes.numel() % 2:
        codes = torch.cat((codes, codes.new_zeros(1)))
    pairs = codes.reshape(-1, 2).to(torch.uint8)
    return (pairs[:, 0] << 4) | pairs[:, 1]
    # END EXERCISE


def unpack_codes(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """int64 codes (numel,) from `pack_codes`' bytes."""
    # BEGIN EXERCISE: high nibble then low nibble per byte, int64, first numel.
    # HINT: The inverse of pack_codes: split each byte into its high and low nibble, in that order, and drop
    #   the padding.
    # HINT: Stack (byte >> 4) & 0xF and byte & 0xF along a new dim 1 so they interleave, flatten, keep the
    #   first numel, convert to int64.
    pairs = torch.stack(((packed >> 4) & 0xF, packed & 0xF), dim=1)
    return pairs.reshape(-1)[:numel].long()
    # END EXERCISE


def _check_weight(weight):
    validate.tensor(weight, "weight", dtypes=WEIGHT_DTYPES, contiguous=False)
    if weight.numel() > MAX_NUMEL:
        raise ValueError(f"weight has {weight.numel()} elements; at most {MAX_NUMEL} (the kernels' offsets are int32)")
    if weight.numel() and not torch.isfinite(weight).all():
        raise ValueError("weight holds NaN or Inf: a block's absmax would be Inf/NaN and every weight in it lost")


def double_quantize(absmax: torch.Tensor):
    """(q int8, step float32 per 256, mean float32 (1,)): the scales on a centred 8-bit grid."""
    # BEGIN EXERCISE: mean (shape (1,)); centred = absmax - mean, padded to blocks of 256; step = block max
    #   |centred| / 127; q = round(centred / step) (step 0 -> divide by 1), int8.
    # HINT: Double quantization stores the fp32 per-block scales as int8: centre them on their mean (they
    #   are all positive), then quantize each group of 256 symmetrically with its own fp32 step.
    # HINT: mean as a (1,) tensor (zeros for an empty input); centred values zero-padded to a multiple of
    #   256; step = per-group max |centred| / 127; q = round(centred / step) clamped to +-127, int8, trimmed
    #   to n.
    # HINT: Guard the all-equal group: divide by `torch.where(step > 0, step, torch.ones_like(step))`, since
    #   0/0 would be NaN.
    mean = absmax.mean().reshape(1) if absmax.numel() else absmax.new_zeros(1)
    centred = absmax - mean
    n = centred.numel()
    padded = torch.zeros(-(-n // DQ_BLOCK) * DQ_BLOCK, dtype=torch.float32, device=absmax.device)
    padded[:n] = centred
    step = padded.view(-1, DQ_BLOCK).abs().amax(dim=1) / DQ_LEVELS
    # An all-equal block has step 0: any divisor gives q = 0, and 0 * step + mean is exact.
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round(padded.view(-1, DQ_BLOCK) / safe[:, None]).clamp_(-DQ_LEVELS, DQ_LEVELS)
    return q.reshape(-1)[:n].to(torch.int8), step, mean
    # END EXERCISE


def nf4_quantize(weight: torch.Tensor, *, double_quant: bool = True) -> NF4Weight:
    """Block-wise (64) absmax NF4 of any float tensor, computed in float32 on its device."""
    _check_weight(weight)
    # BEGIN EXERCISE: flatten in float32, pad to blocks of 64; absmax per block; codes = bucketize(w /
    #   absmax, nf4_midpoints()) (absmax 0 -> divide by 1); pack; store the scales plainly or
    #   double-quantized in an NF4Weight.
    # HINT: Block-wise absmax quantization: each block of 64 weights is divided by its largest magnitude so
    #   it lies in [-1, 1], then each value takes the nearest NF4 level.
    # HINT: Flatten in fp32, zero-pad to a multiple of 64, view (-1, 64); absmax per row; divide (by 1 where
    #   absmax is 0); nearest level = bucketize against the midpoints between levels; trim to n; pack; store
    #   absmax plainly or through double_quantize.
    # HINT: `codes = torch.bucketize(normalized, nf4_midpoints().to(flat.device))`: the midpoints turn
    #   'nearest level' into a sorted search.
    flat = weight.detach().reshape(-1).float()
    n = flat.numel()
    padded = torch.zeros(-(-n // BLOCK) * BLOCK, dtype=torch.float32, device=flat.device)
    padded[:n] = flat
    blocks = padded.view(-1, BLOCK)
    absmax = blocks.abs().amax(dim=1)
    normalized = blocks / torch.where(absmax > 0, absmax, torch.ones_like(absmax))[:, None]
    # bucketize against the midpoints = nearest level; a value exactly on a midpoint goes to the
    # lower level, as the reference's argmin does.
    codes = torch.bucketize(normalized, nf4_midpoints().to(flat.device)).reshape(-1)[:n]
    stored = NF4Weight(pack_codes(codes), tuple(weight.shape), double_quant)
    if double_quant:
        stored.absmax_q, stored.absmax_step, stored.absmax_mean = double_quantize(absmax)
    else:
        stored.absmax = absmax
    return stored
    # END EXERCISE


def nf4_dequantize_torch(w: NF4Weight, dtype=torch.bfloat16) -> torch.Tensor:
    """dequant(W) with torch ops: unpack, look up, scale. The reference the kernels are held to."""
    # BEGIN EXERCISE: unpack, NF4_TABLE[codes] * w.block_scales() repeated 64 times, cast, reshape.
    # HINT: The reference dequantization: value = table[code] * scale of its block; each scale serves 64
    #   consecutive elements.
    # HINT: unpack_codes; w.block_scales() repeated 64 times with repeat_interleave and trimmed to numel;
    #   index the table (on w's device) with the codes, multiply, cast to dtype, reshape to w.shape.
    codes = unpack_codes(w.packed, w.numel)
    scales = w.block_scales().repeat_interleave(BLOCK)[:w.numel]
    return (NF4_TABLE.to(w.device)[codes] * scales).to(dtype).reshape(w.shape)
    # END EXERCISE
