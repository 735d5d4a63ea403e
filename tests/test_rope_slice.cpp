// RoPE on a slice of the head (RopeConfig::rotary_offset): dims [offset, offset +
// rotary_dim) rotate, the rest pass through. A slice rotated in place equals the slice
// copied out, rotated as a head of its own and copied back, bit for bit, and the other
// dims stay as they were; Vulkan against the CPU on every kind of unit the kernel takes
// (16-byte vectors, pairs, two pairs, whole rows), q and k in one op, storage buffers and
// the spec minimums; DeepSeek V3's layer (YaRN with mscale = mscale_all_dim, the rotary
// 64 dims after the 128 of each query and key head, the softmax scale its mscale implies)
// scored against a hand computation; what is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/random.hpp"
#include "support/rope_formulas.hpp"
#include "support/rope_run.hpp"

namespace vkattn::test {
namespace {

// Columns [from, from + width) of every row of |x| (rows of |dim| values).
std::vector<float> columns(const std::vector<float>& x, std::size_t dim, std::size_t from, std::size_t width) {
  std::vector<float> out;
  for (std::size_t r = 0; r < x.size() / dim; ++r) {
    out.insert(out.end(), x.begin() + static_cast<std::ptrdiff_t>(r * dim + from),
               x.begin() + static_cast<std::ptrdiff_t>(r * dim + from + width));
  }
  return out;
}

struct Slice {
  std::size_t head_dim, offset, rotary_dim;
};

// DeepSeek's MLA key (64 of 576 after the 512 latent dims), its non-absorbed query and key
// heads (64 after 128), a slice that is not 16-byte aligned in f32 or f16, and slices
// whose f16 pairs straddle words (an odd number of pairs).
constexpr Slice kSlices[] = {{576, 512, 64}, {192, 128, 64}, {64, 16, 32}, {10, 2, 6}, {16, 4, 8}, {20, 6, 10}};

using RopeSliceTest = BackendTest;

TEST_P(RopeSliceTest, IsRopeOfTheSliceAndLeavesTheRest) {
  const std::vector<std::int32_t> pos = {0, 3, 4096, 2147483647};
  for (const Slice& s : kSlices) {
    for (RopeLayout layout : {RopeLayout::half, RopeLayout::interleaved}) {
      for (DType dtype : {DType::f32, DType::f16}) {
        const RopeConfig sliced{.layout = layout, .rotary_dim = s.rotary_dim, .rotary_offset = s.offset, .base = 1e4};
        const RopeConfig whole{.layout = layout, .base = 1e4};
        const std::size_t rows = pos.size() * 2;
        const std::vector<float> x = normal(rows * s.head_dim, 11);
        const std::vector<float> got = apply_rope(backend(), {pos.size(), 2, s.head_dim}, x, pos, sliced, dtype);
        const std::vector<float> slice = columns(x, s.head_dim, s.offset, s.rotary_dim);
        const std::vector<float> alone = apply_rope(backend(), {pos.size(), 2, s.rotary_dim}, slice, pos, whole, dtype);
        // What passes through is x as the tensor holds it (rounded to f16 where it is f16).
        Tensor raw = backend().tensor({pos.size(), 2, s.head_dim}, dtype);
        backend().upload(raw, x);
        const std::vector<float> held = backend().download(raw);
        const std::string what = std::to_string(s.head_dim) + "/" + std::to_string(s.offset) + "/" +
                                 std::to_string(s.rotary_dim) + (layout == RopeLayout::half ? " half " : " interleaved ") +
                                 to_string(dtype);
        EXPECT_EQ(columns(got, s.head_dim, s.offset, s.rotary_dim), alone) << what;
        EXPECT_EQ(columns(got, s.head_dim, 0, s.offset), columns(held, s.head_dim, 0, s.offset)) << what;
        const std::size_t end = s.offset + s.rotary_dim;
        EXPECT_EQ(columns(got, s.head_dim, end, s.head_dim - end), columns(held, s.head_dim, end, s.head_dim - end)) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RopeSliceTest, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

TEST_F(VulkanVsCpuTest, RopeSliceMatchesQAndKInOneOp) {
  std::vector<std::int32_t> pos = {0, 1, 2147483647, 65536};
  for (std::uint32_t i = 0; i < 12; ++i) pos.push_back(static_cast<std::int32_t>((i * 2654435761u) >> 1));
  const std::size_t n = pos.size();
  for (const Slice& s : kSlices) {
    for (RopeLayout layout : {RopeLayout::half, RopeLayout::interleaved}) {
      for (DType dtype : {DType::f32, DType::f16}) {
        const RopeConfig config{.layout = layout,
                                .rotary_dim = s.rotary_dim,
                                .rotary_offset = s.offset,
                                .base = 1e4,
                                .scaling = RopeScaling::yarn,
                                .factor = 40,
                                .original_context = 4096};
        const std::vector<float> xq = normal(n * 4 * s.head_dim, 3), xk = normal(n * s.head_dim, 4);
        const double atol = dtype == DType::f16 ? 2e-3 : 4e-6, rtol = dtype == DType::f16 ? 1e-3 : 0.0;
        auto run = [&](Backend& b) {
          Tensor q = b.tensor({n, 4, s.head_dim}, dtype), k = b.tensor({n, 1, s.head_dim}, dtype);
          b.upload(q, xq);
          b.upload(k, xk);
          CommandList cmd = b.commands();
          cmd.rope(q, k, pos, config);
          cmd.submit_and_wait();
          std::vector<float> out = b.download(q);
          const std::vector<float> kk = b.download(k);
          out.insert(out.end(), kk.begin(), kk.end());
          return out;
        };
        const std::vector<float> want = run(*cpu_);
        const Shape shape{n * 5, s.head_dim};
        EXPECT_TRUE(all_close(run(*gpu_), want, shape, atol, rtol)) << s.head_dim << "/" << s.offset;
        on_vulkan(storage_buffer_options(),
                  [&](Backend& gpu) { EXPECT_TRUE(all_close(run(gpu), want, shape, atol, rtol)) << "storage buffers"; });
        DeviceOptions minimum = test_options();
        minimum.cap_limits = test_spec_minimum();
        on_vulkan(minimum, [&](Backend& gpu) { EXPECT_TRUE(all_close(run(gpu), want, shape, atol, rtol)) << "spec minimums"; });
      }
    }
  }
}

// DeepSeek V3 (config.json: qk_nope_head_dim 128, qk_rope_head_dim 64, rope_theta 1e4,
// rope_scaling yarn factor 40, original 4096, beta_fast 32, beta_slow 1, mscale 1,
// mscale_all_dim 1), as transformers' DeepseekV3Attention runs it unabsorbed: q and k
// heads of 192, RoPE on dims 128..191 in adjacent pairs (its apply_rotary_pos_emb_interleave;
// llama.cpp's LLAMA_ROPE_TYPE_NORM), cos and sin times mscale / mscale_all_dim = 1, and
// softmax_scale = 192^-0.5 * mscale(40, mscale_all_dim)^2, mscale(s, m) = 0.1 m ln(s) + 1.
// Scores on Vulkan against the same written out in double.
TEST_F(VulkanVsCpuTest, DeepSeekV3ScoresWithRopeOnTheSlice) {
  const std::size_t T = 3, H = 2, D = 192, nope = 128;
  const std::vector<std::int32_t> pos = {0, 1, 7000};
  const RopeConfig config{.layout = RopeLayout::interleaved,
                          .rotary_dim = 64,
                          .rotary_offset = nope,
                          .base = 1e4,
                          .scaling = RopeScaling::yarn,
                          .factor = 40,
                          .original_context = 4096,
                          .yarn = {.beta_fast = 32, .beta_slow = 1, .mscale = 1, .mscale_all_dim = 1}};
  const RopeFrequencies f = rope_frequencies(config, D);
  const std::vector<double> theta = yarn(1e4, 64, 40, 4096, 32, 1);
  ASSERT_EQ(f.theta.size(), theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) EXPECT_NEAR(f.theta[i], theta[i], 1e-12 * theta[i]) << i;
  EXPECT_EQ(f.attention_factor, 1.0);
  const double mscale = 0.1 * std::log(40.0) + 1, scale = mscale * mscale / std::sqrt(192.0);

  const std::vector<float> xq = normal(T * H * D, 21), xk = normal(T * H * D, 22);
  Tensor q = gpu_->tensor({T, H, D}, DType::f32), k = gpu_->tensor({T, H, D}, DType::f32);
  Tensor scores = gpu_->tensor({T, H, T}, DType::f32);
  gpu_->upload(q, xq);
  gpu_->upload(k, xk);
  CommandList cmd = gpu_->commands();
  cmd.rope(q, k, pos, config);
  cmd.attn_scores(q, k, scores, {.q_positions = pos, .k_positions = pos}, {.scale = scale});
  cmd.submit_and_wait();
  const std::vector<float> got = gpu_->download(scores);

  auto rotated = [&](const std::vector<float>& x, std::size_t t, std::size_t h) {
    std::vector<double> row(x.begin() + static_cast<std::ptrdiff_t>((t * H + h) * D),
                            x.begin() + static_cast<std::ptrdiff_t>((t * H + h + 1) * D));
    for (std::size_t i = 0; i < 32; ++i) {
      const double a = row[nope + 2 * i], b = row[nope + 2 * i + 1], angle = pos[t] * theta[i];
      row[nope + 2 * i] = a * std::cos(angle) - b * std::sin(angle);
      row[nope + 2 * i + 1] = a * std::sin(angle) + b * std::cos(angle);
    }
    return row;
  };
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::vector<double> qr = rotated(xq, t, h);
      for (std::size_t j = 0; j < T; ++j) {
        const float s = got[(t * H + h) * T + j];
        if (j > t) {
          EXPECT_TRUE(std::isinf(s) && s < 0) << t << ", " << h << ", " << j;
          continue;
        }
        const std::vector<double> kr = rotated(xk, j, h);
        double dot = 0;
        for (std::size_t d = 0; d < D; ++d) dot += qr[d] * kr[d];
        EXPECT_NEAR(s, dot * scale, 1e-4 * (1 + std::abs(dot * scale))) << t << ", " << h << ", " << j;
      }
    }
  }
}

using RopeSliceErrors = BackendTest;

TEST_P(RopeSliceErrors, BadSlicesAreRefused) {
  Backend& b = backend();
  Tensor x = b.tensor({2, 1, 16}, DType::f32);
  CommandList cmd = b.commands();
  const std::vector<std::int32_t> pos = {0, 1};
  expect_invalid([&] { cmd.rope(x, pos, RopeConfig{.rotary_offset = 3}); },
                 {"config.rotary_offset", "3", "even in [0, head_dim - 2 = 14]"});
  expect_invalid([&] { cmd.rope(x, pos, RopeConfig{.rotary_offset = 16}); }, {"config.rotary_offset", "16"});
  expect_invalid([&] { cmd.rope(x, pos, RopeConfig{.rotary_dim = 12, .rotary_offset = 8}); },
                 {"config.rotary_dim", "12", "head_dim - rotary_offset = 8"});
  expect_invalid(
      [&] {
        b.kv_cache(
            {.n_kv_heads = 1, .head_dim = 16, .capacity = 8, .rope = KvRope::on_read, .rope_config = {.rotary_offset = 8}});
      },
      {"config.rope_config.rotary_offset", "8", "KvRope::stored"});
  EXPECT_EQ(cmd.stats().ops, 0u);
  // The default rotary_dim is the rest of the row.
  EXPECT_EQ(rope_frequencies(RopeConfig{.rotary_offset = 10}, 16).theta.size(), 3u);
}

// Even offsets near SIZE_MAX (a held-out fuzz's 2^64 - 2 and 2^64 - 6), where offset + 2
// or offset + rotary_dim wraps: each refused by name like any offset past the row, with
// rotary_dim left at 0 or set, by rope on x and on q and k (a 576-wide absorbed MLA key
// too), rope_frequencies and an on_read cache; nothing is recorded (recorded, RoPE would
// read and write outside the rows). A slice that fits still runs after them.
TEST_P(RopeSliceErrors, OffsetsThatWrapAreRefused) {
  Backend& b = backend();
  const std::vector<std::int32_t> pos = {0, 1};
  const std::size_t kMax = SIZE_MAX;
  for (std::size_t head_dim : {std::size_t{16}, std::size_t{576}}) {
    Tensor x = b.tensor({2, 1, head_dim}, DType::f32), k = b.tensor({2, 1, head_dim}, DType::f16);
    Tensor q = b.tensor({2, 4, head_dim}, DType::f16);
    const std::string bound = "even in [0, head_dim - 2 = " + std::to_string(head_dim - 2) + "]";
    for (std::size_t offset : {kMax - 1, kMax - 3, kMax - 5, kMax - 15, kMax - head_dim + 1}) {
      for (std::size_t rotary_dim : {std::size_t{0}, std::size_t{2}, std::size_t{4}, head_dim}) {
        const RopeConfig c{.rotary_dim = rotary_dim, .rotary_offset = offset};
        const std::string value = "config.rotary_offset = " + std::to_string(offset);
        const std::initializer_list<const char*> parts = {value.c_str(), bound.c_str()};
        CommandList cmd = b.commands();
        expect_invalid([&] { cmd.rope(x, pos, c); }, parts);
        expect_invalid([&] { cmd.rope(q, k, pos, c); }, parts);
        EXPECT_EQ(cmd.stats().ops, 0u) << offset << " " << rotary_dim;
        expect_invalid([&] { rope_frequencies(c, head_dim); }, parts);
        if (head_dim > kMaxAttentionHeadDim) continue;
        expect_invalid(
            [&] {
              b.kv_cache({.n_kv_heads = 1, .head_dim = head_dim, .capacity = 8, .rope = KvRope::on_read, .rope_config = c});
            },
            {"rotary_offset", std::to_string(offset).c_str()});
      }
    }
  }
  Tensor x = b.tensor({2, 1, 16}, DType::f32);
  CommandList cmd = b.commands();
  cmd.rope(x, pos, {.rotary_offset = 14});
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().ops, 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, RopeSliceErrors, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// rope_frequencies takes head_dim from the caller: below 2 (no rotary pair) it is named,
// whatever the offset, and no message bounds a value by a wrapped (huge) number.
TEST(RopeFrequencyErrors, HeadDimIsNamedAndNoBoundWraps) {
  expect_invalid([&] { rope_frequencies({}, 0); }, {"rope_frequencies: head_dim = 0", ">= 2"});
  expect_invalid([&] { rope_frequencies({}, 1); }, {"rope_frequencies: head_dim = 1", ">= 2"});
  expect_invalid([&] { rope_frequencies({.rotary_offset = 2}, 1); }, {"head_dim = 1"});
  expect_invalid(
      [] {
        KvCacheConfig c{.n_kv_heads = 1, .head_dim = 1, .capacity = 4, .dtype = DType::f32, .rope = KvRope::on_read};
        make_backend(BackendKind::cpu)->kv_cache(c);
      },
      {"kv_cache: config.head_dim = 1", ">= 2"});
  std::size_t refused = 0;
  for (std::size_t head_dim : {0u, 1u, 2u, 3u, 4u, 16u}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{18}, SIZE_MAX - 1,
                               SIZE_MAX - 5, SIZE_MAX}) {
      for (std::size_t rotary_dim : {0u, 2u, 3u, 4u, 18u}) {
        try {
          (void)rope_frequencies({.rotary_dim = rotary_dim, .rotary_offset = offset}, head_dim);
        } catch (const InvalidArgument& e) {
          ++refused;
          const std::string m = e.what(), valid = m.substr(m.find("; valid: "));
          EXPECT_EQ(valid.find("1844674407"), std::string::npos) << m;
        }
      }
    }
  }
  EXPECT_GT(refused, 200u);
}

}  // namespace
}  // namespace vkattn::test
