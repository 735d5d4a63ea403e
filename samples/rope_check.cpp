// vkattn-rope-check: runs RoPE on the chosen Vulkan device and on the CPU reference for a
// few model-like shapes and positions, and prints the largest difference of each. The
// smallest end-to-end use of the library: tensor, upload, record, submit, download.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <vector>

#include "vkattn/vkattn.hpp"

namespace {

struct Case {
  const char* what;
  std::size_t tokens, heads, head_dim;
  vkattn::DType dtype;
  vkattn::RopeLayout layout;
  std::int32_t first_position;
};

std::vector<float> run(vkattn::Backend& b, const Case& c, const std::vector<float>& x,
                       const std::vector<std::int32_t>& positions) {
  vkattn::Tensor t = b.tensor({c.tokens, c.heads, c.head_dim}, c.dtype);
  b.upload(t, x);
  vkattn::CommandList cmd = b.commands();
  cmd.rope(t, positions, {.layout = c.layout});
  cmd.submit_and_wait();
  return b.download(t);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {  // it takes none: say so rather than run past a mistyped option
    const bool help = std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0;
    if (!help) std::fprintf(stderr, "vkattn-rope-check: unknown argument %s\n", argv[1]);
    std::fprintf(help ? stdout : stderr, "usage: vkattn-rope-check (no arguments; $VKATTN_DEVICE picks the device)\n");
    return help ? 0 : 2;
  }
  using vkattn::DType;
  using vkattn::RopeLayout;
  try {
    auto gpu = vkattn::make_backend(vkattn::BackendKind::vulkan);
    auto cpu = vkattn::make_backend(vkattn::BackendKind::cpu);
    std::printf("RoPE on %s against the CPU reference\n\n", gpu->device_name().c_str());
    std::printf("%-28s %-16s %-5s %-12s %-10s %-9s %s\n", "case", "shape", "dtype", "positions", "max |diff|", "tolerance",
                "result");

    const Case cases[] = {
        {"Llama prefill", 512, 32, 128, DType::f32, RopeLayout::half, 0},
        {"Llama decode", 1, 32, 128, DType::f32, RopeLayout::half, 4095},
        {"GPT-J decode, f16", 1, 16, 256, DType::f16, RopeLayout::interleaved, 2047},
        {"long context", 64, 8, 128, DType::f32, RopeLayout::half, 1000000},
        {"near 2^31", 16, 8, 64, DType::f32, RopeLayout::interleaved, 2147483647 - 15},
    };
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    int failures = 0;
    for (const Case& c : cases) {
      std::vector<float> x(c.tokens * c.heads * c.head_dim);
      for (float& v : x) v = normal(rng);
      std::vector<std::int32_t> positions(c.tokens);
      for (std::size_t t = 0; t < c.tokens; ++t) positions[t] = c.first_position + static_cast<std::int32_t>(t);
      const auto got = run(*gpu, c, x, positions), want = run(*cpu, c, x, positions);
      double max_diff = 0;
      for (std::size_t i = 0; i < got.size(); ++i) max_diff = std::fmax(max_diff, std::fabs(got[i] - want[i]));
      const double tolerance = c.dtype == DType::f16 ? 4e-3 : 4e-6;
      const bool ok = max_diff <= tolerance;
      failures += !ok;
      char shape[48], pos[32];
      std::snprintf(shape, sizeof shape, "%zux%zux%zu", c.tokens, c.heads, c.head_dim);
      std::snprintf(pos, sizeof pos, "%d+", c.first_position);
      std::printf("%-28s %-16s %-5s %-12s %-10.2e %-9.0e %s\n", c.what, shape, vkattn::to_string(c.dtype), pos, max_diff,
                  tolerance, ok ? "ok" : "FAIL");
    }
    std::printf("\n%s\n", failures ? "RoPE check FAILED" : "RoPE check passed: the device agrees with the reference");
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vkattn-rope-check: %s\n", e.what());
    return 1;
  }
}
