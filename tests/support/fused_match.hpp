// The fused op (CommandList::attention) on a Vulkan backend against the CPU reference, on
// one of the attention cases, with the tolerances its f32 scores allow. Shared by the fused
// and decode kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"

namespace vkattn::test {

inline void expect_fused_matches(Backend& gpu, Backend& cpu, const AttnCase& c) {
  AttnInputs in = case_inputs(c);
  in.config.path = AttentionPath::fused;
  const AttnOutputs want = run_attention(cpu, in);
  CommandStats stats;
  const std::vector<float> got = run_attention_op(gpu, in, &stats);
  if (gpu.limits().max_texel_buffer_elements == 0) {
    EXPECT_EQ(stats.texel_reads, 0u);
  } else if (gpu.limits().max_texel_buffer_elements >= (1u << 26)) {
    // q, k, v, and the merge's read of the splits' partial results.
    EXPECT_EQ(stats.texel_reads, stats.ops == 2 ? 4u : 3u) << "q, k, v (+ partials)";
  }
  // The scores are f32 like the three stages' (tolerance as for theirs); a score off by at
  // most d moves each probability by at most (e^(2d) - 1) p ~ 2d p, hence out by 2d max|v|.
  const double s_atol = 1e-4 + 2e-6 * score_magnitude(in) + 1e-5 * max_abs(want.scores);
  const bool f16 = c.q_dtype == DType::f16 || c.kv_dtype == DType::f16;
  const double o_atol = (f16 ? 2e-4 : 1e-4) + (std::expm1(2 * s_atol) + 1e-5) * max_abs(in.v);
  EXPECT_TRUE(all_close(got, want.out, in.out_shape(), o_atol, 1e-4)) << "out";
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

}  // namespace vkattn::test
