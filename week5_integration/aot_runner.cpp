// Greedy generation from a packaged GPT (week5_integration/aot_package.py), in C++: no Python at all.
//
//   aot_runner PACKAGE.pt2 NEW_TOKENS TOKEN [TOKEN ...]     (the prompt's token ids, batch 1)
//
// Prints the prompt and the new tokens, space-separated, then the time per decode step. The
// package's metadata says what it accepts (aot_package.metadata); every input is checked
// against it before the compiled code runs, which checks nothing itself.
// Built by aot_package.build_cpp_runner (g++ against the installed torch's headers and libs).
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " PACKAGE.pt2 NEW_TOKENS TOKEN [TOKEN ...]\n";
    return 2;
  }
  const std::string path = argv[1];
  const long new_tokens = std::stol(argv[2]);
  std::vector<int64_t> prompt;
  for (int i = 3; i < argc; ++i) prompt.push_back(std::stoll(argv[i]));

  torch::NoGradGuard no_grad;
  torch::inductor::AOTIModelPackageLoader prefill(path, "prefill");
  torch::inductor::AOTIModelPackageLoader decode(path, "decode");
  auto meta = prefill.get_metadata();
  const long vocab = std::stol(meta.at("course.vocab_size")), layers = std::stol(meta.at("course.n_layers"));
  const long heads = std::stol(meta.at("course.n_heads")), head_dim = std::stol(meta.at("course.head_dim"));
  const long max_len = std::stol(meta.at("course.max_len"));
  const auto device = torch::Device(meta.at("course.device"));
  const auto dtype = meta.at("course.dtype") == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;

  // The checks the compiled code does not make: it would read past its buffers.
  const long P = static_cast<long>(prompt.size());
  if (new_tokens < 1 || P + new_tokens - 1 > max_len) {
    std::cerr << "prompt (" << P << ") + new tokens (" << new_tokens << ") needs " << P + new_tokens - 1
              << " cache positions; the package holds " << max_len << "\n";
    return 2;
  }
  for (int64_t t : prompt) {
    if (t < 0 || t >= vocab) {
      std::cerr << "token ids must be in [0, " << vocab << "), got " << t << "\n";
      return 2;
    }
  }

  auto ids = torch::tensor(prompt, torch::kInt64).view({1, P}).to(device);
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  auto k_cache = torch::zeros({layers, 1, heads, max_len, head_dim}, opts);
  auto v_cache = torch::zeros_like(k_cache);
  auto pos = torch::full({1}, P, torch::TensorOptions().dtype(torch::kInt64).device(device));

  auto logits = prefill.run({ids, k_cache, v_cache})[0];          // (1, P, V)
  auto token = logits.select(1, P - 1).argmax(-1, true);           // (1, 1)
  std::vector<torch::Tensor> out = {ids, token};
  auto start = std::chrono::steady_clock::now();
  for (long i = 1; i < new_tokens; ++i) {
    auto step = decode.run({token, pos, k_cache, v_cache})[0];     // (1, V)
    token = step.argmax(-1, true);
    pos.add_(1);
    out.push_back(token);
  }
  auto all = torch::cat(out, 1).to(torch::kCPU);
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (long i = 0; i < all.size(1); ++i) std::cout << all[0][i].item<int64_t>() << (i + 1 < all.size(1) ? " " : "\n");
  if (new_tokens > 1) std::cerr << "decode: " << 1e3 * seconds / (new_tokens - 1) << " ms per step\n";
  return 0;
}
