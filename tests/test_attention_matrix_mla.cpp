// The matrix kernel's dim split (attn_mt.comp: the subgroups of a row group each own a
// slice of the head dims, their partial scores summed in the softmax pass), which runs
// absorbed MLA within lavapipe's 32 KiB of shared memory, through the matrix-tile layer's
// stand-in (VKATTN_MATRIX=standin): decode steps of two sequences over a wrapping latent
// ring with sinks (128 query heads over one latent KV head, K 576 with V its first 512, in
// f16, q8_0 and q4_0; 16 heads at K 192 / V 128, also within the spec minimums' 16 KiB),
// with the keys in one split and in several; and head_dim 256 prefill on two row groups
// of two slices. Each against the CPU backend's rounded-inputs oracle and its f32 path
// within support/f16_match.hpp's bounds, the mapping read from the pipelines built.
// `ctest -R Coopmat` selects them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/f16_match.hpp"
#include "support/fused_match.hpp"
#include "support/matrix_runs.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

struct MlaCase {
  const char* name;
  std::size_t heads, dk, dv;
  DType dtype;
  bool minimum;  // also at the spec minimums' 16 KiB and 128 invocations
};

class CoopmatMla : public ::testing::TestWithParam<MlaCase> {};
// The same on the matrix units (VKATTN_MATRIX=on), where the device has them (as
// Cases/CoopmatUnits: a GPU, or tools/lavapipe-units.sh).
class CoopmatUnitsMla : public ::testing::TestWithParam<MlaCase> {};

std::string mla_name(const ::testing::TestParamInfo<MlaCase>& info) { return info.param.name; }
void PrintTo(const MlaCase& c, std::ostream* os) { *os << c.name; }

// A Vulkan backend with its cache, its outputs and the pipelines it built.
struct GpuSide {
  std::string name;
  Built built{};
  std::shared_ptr<Backend> b{};
  KvCache cache{};
};

// Decode steps into latent caches (K |dk|, V its first |dv|) of two sequences: 64 tokens
// each appended at once, then 10 decode steps over a ring of 70 slots with 2 sinks, which
// wraps at position 70. The queries carry learned sink logits too. Every step's output
// of each Vulkan backend against the CPU backend's two precisions on its own cache, within
// bounds from the keys each sequence has held. Through the stand-in, or on the |units|.
void decode_over_a_wrapping_latent_ring(const MlaCase& c, bool units) {
  ScopedEnv matrix("VKATTN_MATRIX", units ? "on" : "standin");
  constexpr std::size_t kSeqs = 2, kPrefill = 64, kSteps = 10;
  const KvCacheConfig config{.n_seqs = kSeqs,
                             .n_kv_heads = 1,
                             .head_dim = c.dk,
                             .capacity = 70,
                             .dtype = c.dtype,
                             .n_sinks = 2,
                             .v_head_dim = c.dv,
                             .latent = true};
  // Lavapipe's limits planned for one compute unit (one split per row tile) and for very
  // many (the keys split as far as they go), and the spec minimums'.
  std::vector<GpuSide> sides(c.minimum ? 3 : 2);
  sides[0].name = "one split";
  sides[1].name = "splits";
  if (c.minimum) sides[2].name = "16 KiB";
  for (std::size_t i = 0; i < sides.size(); ++i) {
    DeviceOptions options = matrix_options(i == 2, sides[i].built);
    options.cap_limits->compute_units = i == 1 ? 1u << 20 : 1u;
    std::string why;
    sides[i].b = matrix_backend(options, units, why);
    VKATTN_REQUIRE_BACKEND(sides[i].b, why);
    VKATTN_REQUIRE_MATRIX_KERNELS(*sides[i].b, units);
    sides[i].cache = sides[i].b->kv_cache(config);
  }
  auto cpu = make_backend(BackendKind::cpu);
  KvCache cpu_cache = cpu->kv_cache(config);
  const AttentionConfig f16{
      .sinks = normal(c.heads, 7), .path = AttentionPath::fused, .precision = AttentionPrecision::f16_products};
  AttentionConfig f32 = f16;
  f32.precision = AttentionPrecision::f32;

  // Each backend takes the prefill (keys only) and then each step; |held| is what each
  // sequence's ring has been given, as the cache stores it (a superset of what it holds:
  // the bounds below come out no tighter).
  std::vector<std::vector<float>> held(kSeqs);
  const auto append = [&](const std::vector<float>& k, const std::vector<std::int32_t>& pos,
                          const std::vector<std::int32_t>& seq) {
    const Shape shape{pos.size(), 1, c.dk};
    for (GpuSide& s : sides) {
      Tensor t = s.b->tensor(shape, DType::f32);
      s.b->upload(t, k);
      CommandList cmd = s.b->commands();
      cmd.kv_append(s.cache, t, pos, seq);
      cmd.submit_and_wait();
    }
    Tensor t = cpu->tensor(shape, DType::f32);
    cpu->upload(t, k);
    CommandList cmd = cpu->commands();
    cmd.kv_append(cpu_cache, t, pos, seq);
    cmd.submit_and_wait();
    Tensor as_stored = cpu->tensor(shape, c.dtype);  // rounded or quantized as kv_append does
    cpu->upload(as_stored, k);
    const std::vector<float> stored = cpu->download(as_stored);
    for (std::size_t i = 0; i < pos.size(); ++i) {
      auto& h = held[static_cast<std::size_t>(seq[i])];
      h.insert(h.end(), stored.begin() + static_cast<std::ptrdiff_t>(i * c.dk),
               stored.begin() + static_cast<std::ptrdiff_t>((i + 1) * c.dk));
    }
  };
  {
    std::vector<std::int32_t> pos, seq;
    for (std::size_t s = 0; s < kSeqs; ++s) {
      for (std::size_t p = 0; p < kPrefill; ++p) {
        pos.push_back(static_cast<std::int32_t>(p));
        seq.push_back(static_cast<std::int32_t>(s));
      }
    }
    append(normal(kSeqs * kPrefill * c.dk, 11), pos, seq);
  }
  const Shape q_shape{kSeqs, c.heads, c.dk}, out_shape{kSeqs, c.heads, c.dv};
  for (std::size_t step = 0; step < kSteps; ++step) {
    const auto p = static_cast<std::int32_t>(kPrefill + step);
    const std::vector<std::int32_t> pos{p, p}, seq{0, 1};
    const auto at = static_cast<std::uint32_t>(step);
    append(normal(kSeqs * c.dk, 100 + at), pos, seq);
    const std::vector<float> q = normal(kSeqs * c.heads * c.dk, 300 + at);
    const auto attend = [&](Backend& b, KvCache& cache, const AttentionConfig& cfg) {
      Tensor tq = b.tensor(q_shape, DType::f32), out = b.tensor(out_shape, DType::f32);
      b.upload(tq, q);
      CommandList cmd = b.commands();
      cmd.attention(tq, cache, out, {.q_positions = pos, .q_seq_ids = seq}, cfg);
      cmd.submit_and_wait();
      return b.download(out);
    };
    const std::vector<float> want_rounded = attend(*cpu, cpu_cache, f16), want = attend(*cpu, cpu_cache, f32);
    // The bounds' facts over what each sequence was given: the largest |scale| sum_d
    // |q_d k_d|, and V (each key row's first dv dims) at its largest and its RMS.
    double score_mag = 0, v_max = 0, v_sq = 0;
    std::size_t v_n = 0;
    for (std::size_t s = 0; s < kSeqs; ++s) {
      for (std::size_t j = 0; j < held[s].size() / c.dk; ++j) {
        const float* k = &held[s][j * c.dk];
        for (std::size_t h = 0; h < c.heads; ++h) {
          const float* qh = &q[(s * c.heads + h) * c.dk];
          double a = 0;
          for (std::size_t d = 0; d < c.dk; ++d) a += std::fabs(double{qh[d]} * k[d]);
          score_mag = std::max(score_mag, a / std::sqrt(double(c.dk)));
        }
        for (std::size_t d = 0; d < c.dv; ++d) {
          v_max = std::max(v_max, std::fabs(double{k[d]}));
          v_sq += double{k[d]} * k[d];
          ++v_n;
        }
      }
    }
    const F16Bounds bounds = f16_bounds(score_mag, v_max, std::sqrt(v_sq / v_n), c.dtype == DType::f16, c.dtype != DType::f16);
    for (GpuSide& s : sides) {
      expect_f16_close(attend(*s.b, s.cache, f16), want_rounded, want, out_shape, bounds,
                       s.name + ", step " + std::to_string(step) + " at position " + std::to_string(p));
    }
  }
  for (GpuSide& s : sides) {
    // One row group of 16 heads over four slices (K 576: 9 chunks each, V 8; K 192: 3, 2).
    // 64-lane subgroups would give a row 16 lanes for 16 keys there: K 192 takes two
    // slices, K 576 (18 chunks a slice, past the 9 of a slice's registers) the f32 kernels.
    std::set<unsigned> want{4};
    if (matrix_lanes(*s.b, units) > 32) {
      want = c.dk <= 192 ? std::set<unsigned>{2} : std::set<unsigned>{};
    }
    EXPECT_EQ(s.built.dim_slices(units), want) << s.name << ": the mapping";
    bool merged = false;
    for (const std::string& l : *s.built.lines) merged = merged || l.find("attn_decode_merge") != std::string::npos;
    if (!want.empty()) {
      EXPECT_EQ(merged, s.name == "splits") << s.name << ": the keys split";
    }
    expect_no_validation_messages(*s.b);
  }
}

const MlaCase kMlaCases[] = {
    {"K576V512_f16", 128, 576, 512, DType::f16, false},
    {"K576V512_q8_0", 128, 576, 512, DType::q8_0, false},
    {"K576V512_q4_0", 128, 576, 512, DType::q4_0, false},
    {"K192V128_f16", 16, 192, 128, DType::f16, true},
};
TEST_P(CoopmatMla, DecodeOverAWrappingLatentRing) { decode_over_a_wrapping_latent_ring(GetParam(), false); }
TEST_P(CoopmatUnitsMla, DecodeOverAWrappingLatentRing) { decode_over_a_wrapping_latent_ring(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Latent, CoopmatMla, ::testing::ValuesIn(kMlaCases), mla_name);
INSTANTIATE_TEST_SUITE_P(Latent, CoopmatUnitsMla, ::testing::ValuesIn(kMlaCases), mla_name);

// Head_dim 256 prefill: 40 causal tokens of 4 heads over 2 KV heads (80 rows each: tiles
// of 32 rows, two row groups of two slices, and a last tile of 16 whose second row group
// repeats its last row), under a window of 40 (a key tile that one row group sees and the
// other does not) with learned sinks.
TEST(CoopmatDimSplit, Head256PrefillOnTwoRowGroups) {
  ScopedEnv matrix("VKATTN_MATRIX", "standin");
  Built built;
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, matrix_options(false, built), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  VKATTN_REQUIRE_MATRIX_KERNELS(*gpu, false);
  auto cpu = make_backend(BackendKind::cpu);
  AttnInputs in = random_inputs(40, 4, 2, 72, 256, 1, 91);
  in.config.window = 40u;
  in.config.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  expect_f16_matches(*cpu, in, run_f16(*gpu, in), "head_dim 256");
  EXPECT_EQ(built.dim_slices(), std::set<unsigned>{2}) << "the mapping";
  expect_no_validation_messages(*gpu);
}

}  // namespace
}  // namespace vkattn::test
