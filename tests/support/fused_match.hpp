// The fused op (CommandList::attention) on a Vulkan backend against the CPU reference, on
// one of the attention cases, with the tolerances its f32 scores allow; returns the list's
// statistics (which kernel ran). Shared by the fused, decode and tiled kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"

namespace vkattn::test {

inline CommandStats expect_fused_matches(Backend& gpu, Backend& cpu, const AttnCase& c) {
  const CpuSide& side = cpu_side(cpu, c);
  const AttnInputs& in = side.in;
  AttentionConfig config = in.config;
  config.path = AttentionPath::fused;
  const AttnOutputs& want = side.want;
  CommandStats stats;
  const std::vector<float> got = run_attention_op(gpu, in, config, &stats);
  if (gpu.limits().max_texel_buffer_elements == 0) {
    EXPECT_EQ(stats.texel_reads, 0u);
  } else if (gpu.limits().max_texel_buffer_elements >= (1u << 26)) {
    // q, k, v, and the merge's read of the splits' partial results.
    EXPECT_EQ(stats.texel_reads, stats.ops == 2 ? 4u : 3u) << "q, k, v (+ partials)";
  }
  // The scores are f32 like the three stages': off by at most d = 1e-4 + 2e-6 x what they
  // are made of (score_magnitude: |q||k| terms, ALiBi, the mask), which covers f32 rounding
  // (about 20 ulps at 1e4) and no more: a term in the score itself (|s| ~ 1e4 with a 1e4
  // mask) let a kernel that dropped the mask or the causal rule pass. A score off by d
  // moves each probability by at most (e^(2d) - 1) p ~ 2d p, hence out by 2d max|v|.
  const double s_atol = 1e-4 + 2e-6 * side.score_mag;
  const bool f16 = c.q_dtype == DType::f16 || c.kv_dtype == DType::f16;
  const double o_atol = (f16 ? 2e-4 : 1e-4) + (std::expm1(2 * s_atol) + 1e-5) * side.v_max;
  EXPECT_TRUE(all_close(got, want.out, in.out_shape(), o_atol, 1e-4)) << "out";
  return stats;
}

// Sets an environment variable for the life of the object (the GPU decode kernel's
// variants are picked by $VKATTN_DECODE when a backend is made); restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
};

// Each value of |bad| in the environment variable |var| (read when a backend is made) is
// refused by InvalidArgument naming |var|. Where Vulkan is unavailable the calling test is
// skipped (failed under VKATTN_REQUIRE_VULKAN=1), not passed.
inline void expect_knobs_refused(const char* var, std::initializer_list<const char*> bad) {
  for (const char* value : bad) {
    ScopedEnv env(var, value);
    try {
      auto b = make_backend(BackendKind::vulkan, test_options());
      ADD_FAILURE() << value << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
    } catch (const Error& e) {
      if (vulkan_required() || (e.code() != ErrorCode::no_device && e.code() != ErrorCode::unsupported)) throw;
      GTEST_SKIP() << "no Vulkan device: " << e.what();
    }
  }
}

// Every kernel family attention over a cache can take, each forced on a Vulkan backend
// planned for a device of very many compute units (so the GPU shape splits keys as far as
// it can): the decode kernel (merged in the dispatch or by a second pass), the tiled
// kernel, the lane-per-key fused kernel and the three stages.
struct KernelFamily {
  const char* name;
  KernelShape shape;
  AttentionPath path;
  const char* env;           // $VKATTN_DECODE
  const char* prefill = "";  // $VKATTN_PREFILL
};
inline constexpr KernelFamily kKernelFamilies[] = {{"decode", KernelShape::gpu, AttentionPath::fused, ""},
                                                   {"decode, two-pass", KernelShape::gpu, AttentionPath::fused, "merge=two_pass"},
                                                   {"tiled", KernelShape::gpu, AttentionPath::fused, "", "kernel=tiled"},
                                                   {"lane per key", KernelShape::cpu, AttentionPath::fused, ""},
                                                   {"three stages", KernelShape::cpu, AttentionPath::three_stages, ""}};

inline std::shared_ptr<Backend> family_backend(const KernelFamily& f) {
  DeviceOptions options = shape_options(f.shape);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 1u << 20;
  ScopedEnv decode("VKATTN_DECODE", f.env);
  ScopedEnv prefill("VKATTN_PREFILL", f.prefill);
  return shared_backend(BackendKind::vulkan, options);
}

}  // namespace vkattn::test
