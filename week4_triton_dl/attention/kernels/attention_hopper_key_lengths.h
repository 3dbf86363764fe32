// key_lengths as the Hopper attention kernels take it: the C++ check and conversion both bindings include
// (attention_hopper_binding.cpp, the forward's; hopper_backward.py's BINDING, the backward's). Python checked
// first (attention/padding_keys.py, the same rule): this is for a caller of the raw op, who gets a C++ error
// rather than a kernel reading the wrong memory. The kernels read the tensor as it is (AhKeys,
// attention_hopper_keys.cuh): int32 or int64, entry b at key_lengths + b, so no conversion launch is needed.
// Host code, torch's headers: hashed into both extensions' names (hopper.py, hopper_backward.py).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

struct AhKeyLengths {
    const void* lengths;  // null: no padding keys
    int wide;             // 1: int64 entries, 0: int32 (AhKeys::wide)
};

// `batch`: the tensor whose batch size and device key_lengths must match (q in the forward, o in the backward).
inline AhKeyLengths ah_key_lengths(const c10::optional<at::Tensor>& key_lengths, const at::Tensor& batch)
{
    if (!key_lengths.has_value()) return {nullptr, 0};
    const at::Tensor& kl = *key_lengths;
    TORCH_CHECK(kl.dim() == 1 && kl.size(0) == batch.size(0) && kl.is_contiguous() && kl.device() == batch.device() &&
                    (kl.scalar_type() == at::kInt || kl.scalar_type() == at::kLong),
                "key_lengths must be a contiguous int32 or int64 (B,) = (", batch.size(0), ",) tensor on ",
                batch.device(), "; got ", kl.scalar_type(), " of shape ", kl.sizes(), " on ", kl.device());
    return {kl.data_ptr(), kl.scalar_type() == at::kLong ? 1 : 0};
}
