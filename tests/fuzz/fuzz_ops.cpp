// Fuzz: random calls of every op, from deterministic seeds. Iteration i draws from seed
// VKATTN_FUZZ_SEED + i (default seed 1) and makes one call:
// - 70%: a valid call (fuzz_valid.cpp, fuzz_cache.cpp, fuzz_layer.cpp) with random shapes, dtypes,
//   positions and config, run on the CPU reference and on a Vulkan backend (in turn: the
//   device's own limits, f16 products on the matrix kernels' stand-in; the Vulkan 1.1
//   minimums with storage-buffer reads only; the kernels GPUs run, f16 products on the
//   packed ones), whose
//   outputs must agree within the op's tolerance: RoPE 1e-5 x attention factor (f16: one
//   f16 ulp); copies exactly; attention scores 1e-4 + 2e-6 M (M the magnitude of a score's
//   terms) and 1e-5 relative; probabilities on the same scores 1e-5; out on the same
//   probabilities 1e-4 (f16 inputs 2e-4) and 1e-4 relative; out of a whole chain (the
//   attention op, or the three stages over a cache) that plus (e^(2d) - 1) max|v| for
//   scores off by d = the scores' tolerance (a layer's: plus what RoPE's tolerance on q
//   and k moves a score by). The attention op with f16 products (3 in 10 of its calls,
//   alone or over a cache) against the CPU's rounded-inputs oracle and its f32 reference
//   within support/f16_match.hpp's bounds, and the RMS of the difference from the oracle
//   within its statistical bound; packed f16 chains' bounds where the run took them.
// - 30%: an invalid call (fuzz_invalid.cpp) on both backends, which must throw
//   InvalidArgument whose message names the op ("vkattn: <op>: ...") and record nothing.
// Any other exception, a crash or a hang (submissions time out after 120 s) is a failure;
// the validation layer must stay silent. VKATTN_FUZZ_ITERATIONS sets the count (default
// 300; CI runs 3000 under AddressSanitizer and UndefinedBehaviorSanitizer), split between
// two tests that ctest runs side by side. A failure prints its seed:
// VKATTN_FUZZ_SEED=<seed> VKATTN_FUZZ_ITERATIONS=1 replays it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "fuzz/fuzz_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/env.hpp"
#include "support/f16_match.hpp"
#include "support/fused_match.hpp"

namespace vkattn::fuzz {
namespace {

std::uint32_t env_number(const char* name, std::uint32_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10)) : fallback;
}

struct Tally {
  std::size_t valid = 0, invalid = 0, failures = 0, refused = 0;  // refused: see check_valid
};

void check_valid(const ValidCall& call, Backend& cpu, Backend& gpu, std::uint32_t seed, Tally& tally) {
  ++tally.valid;
  const std::string where =
      "seed " + std::to_string(seed) + ", " + call.op + " on " + gpu.device_name() + ": " + call.description;
  Outputs want, got;
  try {
    want = call.run(cpu, nullptr);
    got = call.run(gpu, &want);
  } catch (const Error& e) {
    // A device that may bind only 4 storage buffers per kernel, with texel reads off,
    // refuses kernels that need more, naming the limit: a valid answer, not a failure.
    if (e.code() == ErrorCode::unsupported && e.call() == "maxPerStageDescriptorStorageBuffers") {
      ++tally.refused;
      return;
    }
    ++tally.failures;
    ADD_FAILURE() << where << "\n  a valid call threw: " << e.what();
    return;
  } catch (const std::exception& e) {
    ++tally.failures;
    ADD_FAILURE() << where << "\n  a valid call threw: " << e.what();
    return;
  }
  const std::vector<Check> checks = call.checks_after ? call.checks_after() : call.checks;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    const auto result = test::all_close(got.at(i), want.at(i), c.shape, c.atol, c.rtol);
    if (!result) {
      ++tally.failures;
      ADD_FAILURE() << where << "\n  " << c.name << ": " << result.message();
    } else if (const double rms = test::rms_difference(got.at(i), want.at(i)); c.rms > 0 && !(rms <= c.rms)) {
      ++tally.failures;
      ADD_FAILURE() << where << "\n  " << c.name << ": RMS difference " << rms << " > " << c.rms;
    }
  }
}

void check_invalid(const InvalidCall& call, Backend& b, Backend& other, std::uint32_t seed, Tally& tally) {
  const std::string where = "seed " + std::to_string(seed) + ", on " + b.device_name() + ": " + call.description;
  const std::string prefix = "vkattn: " + call.op + ": ";
  CommandList cmd = b.commands();
  Tensor x = b.tensor({4}, DType::f32), y = b.tensor({4}, DType::f32);
  cmd.copy(x, y);
  try {
    call.run(b, other, cmd);
    ++tally.failures;
    ADD_FAILURE() << where << "\n  no exception; expected InvalidArgument from " << call.op;
  } catch (const InvalidArgument& e) {
    if (std::string(e.what()).rfind(prefix, 0) != 0) {
      ++tally.failures;
      ADD_FAILURE() << where << "\n  the message does not start with \"" << prefix << "\": " << e.what();
    }
  } catch (const std::exception& e) {
    ++tally.failures;
    ADD_FAILURE() << where << "\n  expected InvalidArgument, got: " << e.what();
  }
  if (cmd.stats().ops != 1) {
    ++tally.failures;
    ADD_FAILURE() << where << "\n  the refused call recorded something";
  }
}

// Iterations [begin, end) of the VKATTN_FUZZ_ITERATIONS the run makes (iteration i: seed
// VKATTN_FUZZ_SEED + i, on the Vulkan backend i % 3 of those below).
void fuzz_iterations(bool second_half) {
  const std::uint32_t total = env_number("VKATTN_FUZZ_ITERATIONS", 300);
  const std::uint32_t begin = second_half ? total / 2 : 0, iterations = second_half ? total - total / 2 : total / 2;
  const std::uint32_t first = env_number("VKATTN_FUZZ_SEED", 1) + begin;
  // The device's own limits, the Vulkan 1.1 minimums with every input read through
  // storage buffers (no texel views), and the kernels GPUs run (KernelShape::gpu: the
  // decode, group and tiled kernels, which lavapipe, a CPU device, is not given by default):
  // between them, every kernel variant.
  // The layer even where VKATTN_TEST_VALIDATION=0 leaves it out of the other tests: CI's
  // sanitizer run makes more iterations, calls no other run validates.
  DeviceOptions options = test::test_options(/*validation=*/true);
  // A hang is a failure, not a stuck run. lavapipe compiles a kernel when it first runs
  // it, inside the submission: on a loaded 2-core machine under ASan that took over 20 s.
  options.submit_timeout_ms = 120000;
  // (8 storage buffers per kernel rather than 4: at 4 with no texel views the attention
  // kernels are refused by name, which test_portability.cpp covers; see test_spec_minimum.)
  DeviceOptions minimum = options;
  minimum.cap_limits = test::test_spec_minimum();
  minimum.cap_limits->max_texel_buffer_elements = 0;
  DeviceOptions gpu_shaped = options;
  gpu_shaped.kernels = KernelShape::gpu;
  // f16_products calls take the matrix kernels' stand-in on the first (f32 ones are not
  // changed by it), the packed f16 tiled and group kernels on the GPU-shaped one.
  options.matrix_units = MatrixUnits::standin;
  std::unique_ptr<Backend> gpus[3];
  std::string why;
  for (auto [i, o] : {std::pair{0, &options}, std::pair{1, &minimum}, std::pair{2, &gpu_shaped}}) {
    // On the GPU-shaped one f16 products take the group kernel's packed variant too (read
    // when a backend is made; by default it runs the exact one), unless the run names
    // its own VKATTN_DECODE.
    std::optional<test::ScopedEnv> packed_group;
    if (i == 2 && !test::env_set("VKATTN_DECODE")) packed_group.emplace("VKATTN_DECODE", "packed=1");
    gpus[i] = test::try_own_backend(BackendKind::vulkan, *o, why);
    VKATTN_REQUIRE_BACKEND(gpus[i], why);
  }
  auto cpu = make_backend(BackendKind::cpu), cpu_other = make_backend(BackendKind::cpu);

  Tally tally;
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < iterations && tally.failures < 20; ++i) {
    const std::uint32_t seed = first + i;
    Rng rng(seed);
    Backend& gpu = *gpus[(begin + i) % 3];
    if (rng.chance(0.7)) {
      check_valid(random_valid_call(rng), *cpu, gpu, seed, tally);
    } else {
      ++tally.invalid;
      const InvalidCall call = random_invalid_call(rng);
      check_invalid(call, *cpu, *cpu_other, seed, tally);
      check_invalid(call, gpu, *cpu, seed, tally);
    }
    if ((i + 1) % 1000 == 0) {
      const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
      std::printf("fuzz: %u iterations, %.0f s\n", i + 1, s.count());
      std::fflush(stdout);
    }
  }
  for (const auto& gpu : gpus) {
    for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
  const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
  std::printf(
      "fuzz: %zu iterations from seed %u (%zu valid calls compared, %zu refused by a 4-storage-buffer "
      "device, %zu invalid calls on both backends) in %.0f s: %zu failures\n",
      tally.valid + tally.invalid, first, tally.valid - tally.refused, tally.refused, tally.invalid, s.count(), tally.failures);
  // Refusals come from one of the fuzz's backends only: most valid calls must be compared
  // (checked over enough calls: a replayed seed may be one refusal).
  if (tally.valid >= 100) {
    EXPECT_LT(tally.refused, tally.valid / 2);
  }
}

// The run in two halves, which ctest runs side by side: the same seeds, in half the time on
// two cores.
TEST(Fuzz, VulkanMatchesCpuAndBadCallsAreRefused) { fuzz_iterations(false); }
TEST(Fuzz, SecondHalfOfTheIterations) { fuzz_iterations(true); }

}  // namespace
}  // namespace vkattn::fuzz
