// The C++ side of week4_triton_dl/attention/hopper.py's extension: checks again (cheap, and a caller of the raw
// op gets a C++ error, not a crash), the stream, the call of the .cu's extern "C" entry. hopper.py replaces
// NAMESPACE by a name unique to the source version before load_inline builds it.
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "attention_hopper_key_lengths.h"  // ah_key_lengths: key_lengths checked, as a pointer and a width

extern "C" int attention_hopper_forward_cuda(int dtype, const void* q, const void* k, const void* v, void* out,
                                             float* lse, int bh_count, int seq_q, int seq_k, int d, float c,
                                             int causal, const void* key_lengths, int lengths_wide, int heads,
                                             void* stream);

namespace {
void forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double c,
             const c10::optional<at::Tensor>& key_lengths, const at::Tensor& out, const at::Tensor& lse) {
    TORCH_CHECK(q.is_cuda() && q.dim() == 4 && q.is_contiguous(), "q must be a contiguous CUDA (B, H, S, D) tensor");
    TORCH_CHECK(k.sizes() == v.sizes() && k.is_contiguous() && v.is_contiguous(), "k and v: contiguous, one shape");
    TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "q, k, v: one dtype");
    TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16, "fp16 or bf16 only");
    TORCH_CHECK(out.sizes() == q.sizes() && out.is_contiguous() && out.scalar_type() == q.scalar_type(), "out");
    TORCH_CHECK(lse.dim() == 3 && lse.is_contiguous() && lse.scalar_type() == at::kFloat, "lse: float32 (B, H, Sq)");
    const AhKeyLengths padding = ah_key_lengths(key_lengths, q);
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t bh = q.size(0) * q.size(1);
    const int err = attention_hopper_forward_cuda(
        q.scalar_type() == at::kBFloat16, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
        lse.data_ptr<float>(), (int)bh, (int)q.size(2), (int)k.size(2), (int)q.size(3), (float)c, causal,
        padding.lengths, padding.wide, (int)q.size(1), c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
    TORCH_CHECK(err == 0, "attention_hopper launch failed with code ", err,
                " (> 0: a cudaError_t; -1: no cuTensorMapEncodeTiled in this driver; -2: a tensor map was refused)");
}
}  // namespace

TORCH_LIBRARY(NAMESPACE, m) {
    m.def("forward(Tensor q, Tensor k, Tensor v, bool causal, float c, Tensor? key_lengths, Tensor(a!) out, "
          "Tensor(b!) lse) -> ()");
}
TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) { m.impl("forward", &forward); }
