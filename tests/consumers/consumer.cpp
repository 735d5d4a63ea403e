// A program that uses vkattn as an application would, built three ways by run.sh (CMake's
// find_package, pkg-config, add_subdirectory): RoPE, then attention, on the default Vulkan
// device, checked against the CPU backend.
#include <vkattn/vkattn.h>
#include <vkattn/vkattn.hpp>
// The API stays Vulkan-free: only vkattn/vulkan.hpp and vkattn/vkattn_vulkan.h, which this
// program does not include, bring in the Vulkan headers.
#ifdef VK_VERSION_1_0
#error "a vkattn header other than vulkan.hpp or vkattn_vulkan.h includes <vulkan/vulkan.h>"
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

namespace {

constexpr std::size_t kTokens = 5, kHeads = 4, kKvHeads = 2, kDim = 32;

std::vector<float> values(std::size_t n, float step) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(step * static_cast<float>(i + 1));
  return v;
}

// out of rope(q), rope(k), then attention over the keys at positions 0..kTokens-1.
std::vector<float> rope_then_attention(vkattn::Backend& b) {
  vkattn::Tensor q = b.tensor({kTokens, kHeads, kDim}, vkattn::DType::f32);
  vkattn::Tensor k = b.tensor({kTokens, kKvHeads, kDim}, vkattn::DType::f32);
  vkattn::Tensor v = b.tensor({kTokens, kKvHeads, kDim}, vkattn::DType::f16);
  vkattn::Tensor out = b.tensor({kTokens, kHeads, kDim}, vkattn::DType::f32);
  b.upload(q, values(kTokens * kHeads * kDim, 0.37f));
  b.upload(k, values(kTokens * kKvHeads * kDim, 0.71f));
  b.upload(v, values(kTokens * kKvHeads * kDim, 1.13f));
  const std::vector<std::int32_t> positions = {0, 1, 2, 3, 4};
  vkattn::CommandList cmd = b.commands();
  cmd.rope(q, k, positions, {.base = 500000.0});
  cmd.attention(q, k, v, out, {.q_positions = positions});
  cmd.submit_and_wait();
  return b.download(out);
}

}  // namespace

int main() {
  if (std::strcmp(vkattn::version(), VKATTN_VERSION_STRING) != 0) {
    std::fprintf(stderr, "headers %s, library %s\n", VKATTN_VERSION_STRING, vkattn::version());
    return 1;
  }
  try {
    auto gpu = vkattn::make_backend(vkattn::BackendKind::vulkan);
    auto cpu = vkattn::make_backend(vkattn::BackendKind::cpu);
    const std::vector<float> got = rope_then_attention(*gpu), want = rope_then_attention(*cpu);
    float diff = 0.0f;
    for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::fabs(got[i] - want[i]));
    std::printf("vkattn %s on %s: RoPE and attention, max |Vulkan - CPU| = %.1e\n", vkattn::version(), gpu->device_name().c_str(),
                static_cast<double>(diff));
    return diff <= 1e-4f ? 0 : 1;
  } catch (const std::exception& e) {  // vkattn::Error (no device, ...) or InvalidArgument
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
