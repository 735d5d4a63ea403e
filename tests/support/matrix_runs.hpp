// Running the matrix kernel (attn_mt.comp) through its stand-in in the Coopmat tests: the
// pipelines a backend built, read from its info log (whether the kernel ran, and with which
// mapping), and backends planned for the device's limits or the spec minimums'.
#pragma once

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "support/api.hpp"
#include "support/attention_io.hpp"
#include "support/backends.hpp"

namespace vkattn::test {

// The pipelines built, read for the matrix kernels' choices.
struct Built : BuiltPipelines {
  bool matrix() const { return !dim_slices().empty(); }
  // The units' attention kernel (attn_mt, the cooperative-matrix form, attn_mt_cm8, its
  // tiles of 8x8x8 matrices, or attn_mt2 on NV cooperative matrices 2) was built; the
  // self-test's pipeline (mt_selftest) does not count.
  bool units() const { return !specs(true).empty(); }
  // DK_CHUNKS (spec constant 5) of heads |head_dim| wide: the 16-dim chunks, padded to a
  // power of two up to 8 and a multiple of 4 past that, as the op pads them.
  static unsigned padded_chunks(std::size_t head_dim) {
    const auto chunks = static_cast<unsigned>((head_dim + 15) / 16);
    return chunks <= 8 ? std::bit_ceil(chunks) : (chunks + 3) / 4 * 4;
  }
  // attn_mt2, the kernel on NV cooperative matrices 2, was built.
  bool nv2() const { return any("attn_mt2"); }
  // An attn_mt2 pipeline for heads |head_dim| wide (DK_CHUNKS as dim_slices(head_dim) pads
  // it) was built: what ops of that width chose, of a backend other tests used too.
  bool nv2(std::size_t head_dim) const {
    const unsigned padded = padded_chunks(head_dim);
    for (const std::vector<unsigned>& s : parse({"built pipeline attn_mt2 (spec "})) {
      if (s.size() > 5 && s[5] == padded) return true;
    }
    return false;
  }
  // The matrix pipelines' DIM_SLICES (spec constant 18, VKATTN_SPEC_MT_DIM_SLICES): 1 for
  // the row split, more for the dim split (|units|: of the units' pipelines).
  std::set<unsigned> dim_slices(bool units = false) const { return spec(18, 1, units); }
  // The same of the pipelines for heads |head_dim| wide (padded_chunks): what ops of that
  // width chose, of a backend other tests used too.
  std::set<unsigned> dim_slices(std::size_t head_dim) const {
    const unsigned padded = padded_chunks(head_dim);
    std::set<unsigned> out;
    for (const std::vector<unsigned>& s : specs()) {
      if (s.size() > 5 && s[5] == padded) out.insert(s.size() > 18 ? s[18] : 1);
    }
    return out;
  }
  // The values the stand-in's pipelines took for spec constant |id| (shaders/common/params.h's
  // VKATTN_SPEC_MT_*; |absent| where a pipeline's list stops before it).
  std::set<unsigned> spec(std::size_t id, unsigned absent, bool units = false) const {
    std::set<unsigned> out;
    for (const std::vector<unsigned>& s : specs(units)) out.insert(s.size() > id ? s[id] : absent);
    return out;
  }
  // Each stand-in pipeline's spec constants (|units|: each units' pipeline's).
  std::vector<std::vector<unsigned>> specs(bool units = false) const {
    static const std::vector<std::string_view> kStandin{"built pipeline attn_mt_standin (spec "};
    static const std::vector<std::string_view> kUnits{"built pipeline attn_mt (spec ", "built pipeline attn_mt_cm8 (spec ",
                                                      "built pipeline attn_mt2 (spec "};
    return parse(units ? kUnits : kStandin);
  }
  // The spec constants of each pipeline whose line starts with one of |heads|.
  std::vector<std::vector<unsigned>> parse(const std::vector<std::string_view>& heads) const {
    std::vector<std::vector<unsigned>> out;
    for (const std::string& l : *lines) {
      std::size_t at = 0;
      for (const std::string_view head : heads) {
        if (l.rfind(head, 0) == 0) at = head.size();
      }
      if (at == 0) continue;
      std::vector<unsigned>& spec = out.emplace_back();
      for (; at < l.size() && std::isdigit(static_cast<unsigned char>(l[at]));) {
        std::size_t used = 0;
        spec.push_back(static_cast<unsigned>(std::stoul(l.substr(at), &used)));
        at += used + 1;  // past the comma
      }
    }
    return out;
  }
};

// The subgroup size the matrix kernel asks of |b|: on the |units| the device's default,
// through the stand-in 16 where the device allows it, else the nearest it allows: above 32 lanes the scalar pass would give a row
// of a four-slice dim split more lanes than half a tile's keys, and the planner takes two slices or the row split instead.
inline unsigned matrix_lanes(const Backend& b, bool units = false) { return units ? b.limits().subgroup_size : kernel_lanes(b); }

// The device's limits, or the spec minimums' shared memory (16 KiB) and invocations (128)
// with the device's subgroups.
inline DeviceOptions matrix_options(bool minimum) {
  DeviceOptions options = test_options();
  // llvmpipe compiles a pipeline at its first dispatch, inside the submission: the
  // stand-in's unrolled tiles take tens of seconds where other tests load the machine.
  options.submit_timeout_ms = 600000;
  options.cap_limits = uncapped();
  if (minimum) {
    options.cap_limits->max_shared_memory = 16384;
    options.cap_limits->max_workgroup_invocations = 128;
    options.cap_limits->max_workgroup_size = {128, 128, 64};
  }
  return options;
}

// The same, the pipelines built going to |built|.
inline DeviceOptions matrix_options(bool minimum, const Built& built) {
  DeviceOptions options = matrix_options(minimum);
  built.attach(options);
  return options;
}

// A backend of matrix_options(minimum) shared with the process's other tests
// (shared_backend_with_builds): |built| then holds every build since it was made, earlier
// tests' too. Null, with |why|, where there is no Vulkan device.
inline std::shared_ptr<Backend> shared_matrix_backend(bool minimum, Built& built, std::string& why) {
  return unless_unavailable(
      why, [&] { return shared_backend_with_builds(BackendKind::vulkan, matrix_options(minimum), built.lines); });
}

// |make|(options) with the matrix units asked for (MatrixUnits::on), validated where the
// layer knows VK_KHR_cooperative_matrix; under an older layer (Debian 12's, which the GPU
// bundle carries) vkattn does not query the extension (devices.md), so the backend is
// made again without validation.
template <class Make>
auto with_units(DeviceOptions options, Make make) -> decltype(make(options)) {
  options.matrix_units = MatrixUnits::on;
  auto b = make(options);
  if (b && !b->limits().matrix_units && options.validation.value_or(false)) {
    options.validation = false;
    b = make(options);
  }
  return b;
}

// A Vulkan backend of its own, of |options|, with the units so asked for; null, with
// |why|, without Vulkan.
inline std::unique_ptr<Backend> units_backend(const DeviceOptions& options, std::string& why) {
  return with_units(options, [&](const DeviceOptions& o) { return try_own_backend(BackendKind::vulkan, o, why); });
}

// A backend of its own of |options|: on the |units| (units_backend), or as asked.
inline std::unique_ptr<Backend> matrix_backend(const DeviceOptions& options, bool units, std::string& why) {
  return units ? units_backend(options, why) : try_own_backend(BackendKind::vulkan, options, why);
}

// One of matrix_options(false) with the units so asked for, shared with the process's
// other tests as shared_matrix_backend's.
inline std::shared_ptr<Backend> shared_units_backend(Built& built, std::string& why) {
  return with_units(matrix_options(false), [&](const DeviceOptions& o) {
    return unless_unavailable(why, [&] { return shared_backend_with_builds(BackendKind::vulkan, o, built.lines); });
  });
}

// Skips a test whose backend |b| has no matrix units (or whose units failed their
// self-test); fails it instead under VKATTN_TEST_REQUIRE_MATRIX_UNITS=1
// (tools/lavapipe-units.sh), where they must be there.
#define VKATTN_REQUIRE_MATRIX_UNITS(b)                                                                      \
  do {                                                                                                      \
    if (!(b).limits().matrix_units) {                                                                       \
      const std::string why_ = (b).device_name() + " has no matrix units (or they failed their self-test)"; \
      if (env_is("VKATTN_TEST_REQUIRE_MATRIX_UNITS", "1")) FAIL() << why_;                                  \
      GTEST_SKIP() << why_;                                                                                 \
    }                                                                                                       \
  } while (false)

// The matrix kernels' tests: on the |units|, skipped as VKATTN_REQUIRE_MATRIX_UNITS skips;
// through the stand-in, skipped on subgroups under 8 lanes (it needs 8 to 64).
#define VKATTN_REQUIRE_MATRIX_KERNELS(b, units)                      \
  do {                                                               \
    if (units) {                                                     \
      VKATTN_REQUIRE_MATRIX_UNITS(b);                                \
    } else {                                                         \
      VKATTN_REQUIRE_EIGHT_LANES(b, "the matrix kernels' stand-in"); \
    }                                                                \
  } while (false)

inline std::vector<float> run_f16(Backend& gpu, AttnInputs in, CommandStats* stats = nullptr) {
  in.config.precision = AttentionPrecision::f16_products;
  in.config.path = AttentionPath::fused;
  return run_attention_op(gpu, in, stats);
}

// Causal prefill of 20 tokens over 48 keys whose K and V past position 19 are NaN (a stale
// slot no row sees): the second 16-key tile holds both kinds.
inline AttnInputs nan_in_unseen_keys_inputs() {
  AttnInputs in = random_inputs(20, 8, 2, 48, 64, 1, 81);
  for (std::size_t i = 0; i < 20; ++i) in.q_pos[i] = static_cast<std::int32_t>(i);
  for (std::size_t j = 0; j < 48; ++j) in.k_pos[j] = static_cast<std::int32_t>(j);
  for (std::size_t j = 20; j < 48; ++j) {
    for (std::size_t e = 0; e < 2 * 64; ++e) in.k[j * 128 + e] = in.v[j * 128 + e] = std::nanf("");
  }
  return in;
}

}  // namespace vkattn::test
