// Quantized K and V (q8_0, q4_0): caches appended on Vulkan hold exactly the CPU's bytes;
// attention over quantized caches and plain quantized tensors matches the CPU on every path
// and kernel family; uploads, downloads and raw bytes; accuracy against f32 K/V; bad
// arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr DType kQuantTypes[] = {DType::q8_0, DType::q4_0};

// Values that exercise the blocks: N(0, 1) rows, a block of zeros, a block with one huge
// value, a block of large values (|x| up to 6e4, no NaN), and a block of halfway cases
// (scale 1: codes x rounded, ties away from zero for q8_0).
std::vector<float> hard_values(std::size_t n, std::uint32_t seed) {
  std::vector<float> x = normal(n, seed);
  std::mt19937 rng(seed);
  for (std::size_t b = 0; b < n / 32; ++b) {
    switch (rng() % 6) {
      case 0: std::fill_n(&x[32 * b], 32, 0.0f); break;
      case 3:
        for (std::size_t i = 0; i < 32; ++i) x[32 * b + i] = static_cast<float>(i % 16) - 7.5f;
        x[32 * b + 31] = 127.0f;  // q8_0: d = 1
        x[32 * b + 30] = -8.0f;   // q4_0 (with the 127 above: d = -127 / 8)
        break;
      case 1: x[32 * b + rng() % 32] = 6e4f; break;
      case 2:
        for (std::size_t i = 0; i < 32; ++i) x[32 * b + i] = std::clamp(x[32 * b + i] * 2e4f, -6e4f, 6e4f);
        break;
      default: break;
    }
  }
  return x;
}

// Appends (f32 and f16 inputs, three sequences, wrapping the ring) and a sequence copy give
// the same bytes on both backends.
TEST_F(VulkanVsCpuTest, QuantizedAppendMatchesCpuByteForByte) {
  for (DType dtype : kQuantTypes) {
    for (DType input : {DType::f32, DType::f16}) {
      // 7 slots of 1 x 32 elements: an odd number of blocks per sequence, so sequences
      // share scale words.
      const KvCacheConfig config{.n_seqs = 3, .n_kv_heads = 1, .head_dim = 32, .capacity = 7, .dtype = dtype, .n_sinks = 1};
      KvCache g = gpu_->kv_cache(config), c = cpu_->kv_cache(config);
      std::vector<std::int32_t> next(3, 0);
      for (int call = 0; call < 6; ++call) {
        std::vector<std::int32_t> pos, seq;
        for (std::int32_t s = 0; s < 3; ++s) {
          for (int i = 0; i < (call + s) % 3 + 1; ++i) {
            pos.push_back(next[s]++);
            seq.push_back(s);
          }
        }
        const std::size_t n = pos.size();
        const std::vector<float> kx = hard_values(n * 32, 100 + call), vx = hard_values(n * 32, 200 + call);
        for (auto [b, cache] : {std::pair{gpu_.get(), &g}, std::pair{cpu_.get(), &c}}) {
          Tensor k = b->tensor({n, 1, 32}, input), v = b->tensor({n, 1, 32}, input);
          b->upload(k, kx);
          b->upload(v, vx);
          CommandList cmd = b->commands();
          cmd.kv_append(*cache, k, v, pos, seq);
          if (call == 5) cmd.kv_copy_sequence(*cache, 1, 2);
          cmd.submit_and_wait();
        }
        const std::string what = std::string(to_string(dtype)) + " from " + to_string(input) + ", call " + std::to_string(call);
        EXPECT_EQ(gpu_->save_cache(g), cpu_->save_cache(c)) << what;  // bookkeeping, K and V bytes
      }
    }
  }
}

// Outside the contract (values must be finite), the backends still agree byte for byte:
// a block holding an infinity keeps an infinite scale (as ggml's; the CPU once stored 0, its
// block reading back zeros), and a NaN's code is 0 without touching its neighbours (q4_0's
// int of a NaN once set the top bit of element 7's code).
TEST_F(VulkanVsCpuTest, QuantizedAppendOfNonFiniteValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity(), kNan = std::numeric_limits<float>::quiet_NaN();
  for (DType dtype : kQuantTypes) {
    const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 64, .capacity = 2, .dtype = dtype};
    std::vector<float> x(2 * 64, 0.5f);
    x[0] = kNan;       // block 0: a NaN where element 7 shares its word
    x[64 + 3] = kInf;  // block 2: an infinity
    x[96 + 5] = -kInf;
    KvCache g = gpu_->kv_cache(config), c = cpu_->kv_cache(config);
    for (auto [b, cache] : {std::pair{gpu_.get(), &g}, std::pair{cpu_.get(), &c}}) {
      Tensor k = b->tensor({2, 1, 64}, DType::f32);
      b->upload(k, x);
      CommandList cmd = b->commands();
      cmd.kv_append(*cache, k, k, std::vector<std::int32_t>{0, 1});
      cmd.submit_and_wait();
    }
    EXPECT_EQ(gpu_->save_cache(g), cpu_->save_cache(c)) << to_string(dtype);
    Tensor t = cpu_->tensor({2, 1, 64}, dtype);  // the same quantizer, read back
    cpu_->upload(t, x);
    const std::vector<float> back = cpu_->download(t);
    EXPECT_EQ(back[7], back[8]) << to_string(dtype) << ": the NaN's neighbour, another 0.5 of its block";
    EXPECT_TRUE(std::isnan(back[64])) << to_string(dtype) << ": the infinity's block reads back NaN (0 x inf)";
  }
}

// Attention over quantized caches: decode and prefill chunks of several sequences through
// a ring with sinks that wraps (both sequences pass its 14 slots), soft-capping that bends
// the scores (3, on scores of about N(0, 1)) and a window that hides keys (8), and keys
// rotated as they are read; every path and both kernel families, against the CPU on the
// same bytes.
TEST_F(VulkanVsCpuTest, AttentionOverQuantizedCaches) {
  const std::size_t heads = 8, kv_heads = 2, d = 64;
  for (DType dtype : kQuantTypes) {
    for (KvRope rope : {KvRope::stored, KvRope::on_read}) {
      const KvCacheConfig config{
          .n_seqs = 2, .n_kv_heads = kv_heads, .head_dim = d, .capacity = 16, .dtype = dtype, .n_sinks = 2, .rope = rope};
      const AttentionConfig attn{.window = 8u, .softcap = 3.0};
      for (KernelShape shape : {KernelShape::cpu, KernelShape::gpu}) {
        on_vulkan(shape_options(shape), [&](Backend& gpu) {
          KvCache g = gpu.kv_cache(config), c = cpu_->kv_cache(config);
          std::vector<std::int32_t> next{0, 0};
          for (int call = 0; call < 8; ++call) {
            std::vector<std::int32_t> pos, seq;
            const int n0 = call == 0 ? 12 : 1 + call % 2, n1 = call == 0 ? 10 : 1;  // 22 and 17 tokens in all
            for (int i = 0; i < n0; ++i) pos.push_back(next[0]++), seq.push_back(0);
            for (int i = 0; i < n1; ++i) pos.push_back(next[1]++), seq.push_back(1);
            const std::size_t n = pos.size();
            const std::vector<float> qx = normal(n * heads * d, 300 + call), kx = normal(n * kv_heads * d, 400 + call),
                                     vx = normal(n * kv_heads * d, 500 + call);
            std::vector<std::vector<float>> outs;
            for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
              for (auto [b, cache] : {std::pair{&gpu, &g}, std::pair{cpu_.get(), &c}}) {
                Tensor q = b->tensor({n, heads, d}, DType::f32), k = b->tensor({n, kv_heads, d}, DType::f16),
                       v = b->tensor({n, kv_heads, d}, DType::f16), out = b->tensor({n, heads, d}, DType::f32);
                b->upload(q, qx);
                b->upload(k, kx);
                b->upload(v, vx);
                CommandList cmd = b->commands();
                if (path == AttentionPath::fused) cmd.kv_append(*cache, k, v, pos, seq);
                AttentionConfig a = attn;
                a.path = path;
                cmd.attention(q, *cache, out, {.q_positions = pos, .q_seq_ids = seq}, a);
                cmd.submit_and_wait();
                outs.push_back(b->download(out));
              }
            }
            const std::string what = std::string(to_string(dtype)) + (rope == KvRope::on_read ? ", on_read" : "") + ", " +
                                     to_string(shape) + " kernels, call " + std::to_string(call);
            EXPECT_TRUE(all_close(outs[0], outs[1], {n, heads, d}, 1e-4, 1e-4)) << "fused, " << what;
            EXPECT_TRUE(all_close(outs[2], outs[3], {n, heads, d}, 1e-4, 1e-4)) << "three stages, " << what;
          }
        });
      }
    }
  }
}

// Plain quantized K and V (uploaded: quantized on the host), any mix of dtypes.
TEST_F(VulkanVsCpuTest, AttentionOverQuantizedTensors) {
  AttnInputs in = random_inputs(3, 8, 2, 200, 64, 1, 61);
  for (auto [k_dtype, v_dtype] : {std::pair{DType::q8_0, DType::q8_0}, std::pair{DType::q4_0, DType::q4_0},
                                  std::pair{DType::q8_0, DType::f32}, std::pair{DType::f16, DType::q4_0}}) {
    const DType kd = k_dtype, vd = v_dtype;  // lambdas capture variables (clang 14: not structured bindings)
    auto run = [&](Backend& b, AttentionPath path) {
      Tensor q = b.tensor({3, 8, 64}, DType::f32), k = b.tensor({200, 2, 64}, kd), v = b.tensor({200, 2, 64}, vd),
             out = b.tensor({3, 8, 64}, DType::f32);
      b.upload(q, in.q);
      b.upload(k, in.k);
      b.upload(v, in.v);
      CommandList cmd = b.commands();
      AttentionConfig config = in.config;
      config.path = path;
      cmd.attention(q, k, v, out, {in.q_pos, in.k_pos}, config);
      cmd.submit_and_wait();
      return b.download(out);
    };
    const std::vector<float> want = run(*cpu_, AttentionPath::automatic);
    for (KernelShape shape : {KernelShape::cpu, KernelShape::gpu}) {
      on_vulkan(shape_options(shape), [&](Backend& gpu) {
        for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
          EXPECT_TRUE(all_close(run(gpu, path), want, {3, 8, 64}, 1e-4, 1e-4))
              << "k " << to_string(kd) << ", v " << to_string(vd) << ", " << to_string(shape) << " kernels, path "
              << static_cast<int>(path);
        }
      });
    }
  }
}

// Uploads quantize as the reference does and downloads dequantize; raw bytes round-trip.
TEST_F(VulkanVsCpuTest, QuantizedUploadDownloadAndRawBytes) {
  const std::vector<float> x = hard_values(4 * 2 * 64, 71);
  for (DType dtype : kQuantTypes) {
    std::vector<std::vector<float>> down;
    std::vector<std::vector<std::uint8_t>> raw;
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      Tensor t = b->tensor({4, 2, 64}, dtype);
      EXPECT_EQ(t.bytes(), dtype == DType::q8_0 ? 4u * 2 * 68 : 4u * 2 * 36) << "codes and f16 scales";
      b->upload(t, x);
      down.push_back(b->download(t));
      raw.push_back(b->download_raw(t));
      Tensor u = b->tensor({4, 2, 64}, dtype);
      b->upload_raw(u, raw.back());
      EXPECT_EQ(b->download_raw(u), raw.back());
    }
    EXPECT_EQ(raw[0], raw[1]) << to_string(dtype);
    EXPECT_EQ(down[0], down[1]) << to_string(dtype);
    // Within a step of the uploaded values (step: the block's largest |x| over 127 or 8; a
    // little more for the scale's f16 rounding and q4_0's top code; test_quant.cpp has the
    // exact rules).
    for (std::size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0;
      for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
      const float step = dtype == DType::q8_0 ? amax / 127 * 0.57f : amax / 8 * 1.01f;
      for (std::size_t i = 32 * b; i < 32 * b + 32; ++i) {
        ASSERT_LE(std::fabs(down[1][i] - x[i]), step + 1e-6f) << to_string(dtype) << ", element " << i;
      }
    }
  }
}

// NMSE of attention with quantized K/V against f32 K/V on random data (ggml's op tests hold
// quantized flash attention to 5e-4), and the worst relative error of a row.
double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    ref += double{want[i]} * want[i];
  }
  return err / ref;
}

TEST_F(VulkanVsCpuTest, QuantizedAccuracyAgainstF32) {
  AttnInputs in = random_inputs(4, 8, 2, 512, 128, 1, 81);
  auto run = [&](DType dtype) {
    Tensor q = gpu_->tensor({4, 8, 128}, DType::f32), k = gpu_->tensor({512, 2, 128}, dtype),
           v = gpu_->tensor({512, 2, 128}, dtype), out = gpu_->tensor({4, 8, 128}, DType::f32);
    gpu_->upload(q, in.q);
    gpu_->upload(k, in.k);
    gpu_->upload(v, in.v);
    CommandList cmd = gpu_->commands();
    cmd.attention(q, k, v, out, {in.q_pos, in.k_pos});
    cmd.submit_and_wait();
    return gpu_->download(out);
  };
  const std::vector<float> f32 = run(DType::f32);
  const double q8 = nmse(run(DType::q8_0), f32), q4 = nmse(run(DType::q4_0), f32);
  RecordProperty("nmse_q8_0", std::to_string(q8));
  RecordProperty("nmse_q4_0", std::to_string(q4));
  std::printf("attention NMSE against f32 K/V: q8_0 %.3g, q4_0 %.3g\n", q8, q4);
  EXPECT_LE(q8, 5e-4);
  EXPECT_LE(q4, 2e-2);  // reported, not a target: 4-bit codes
}

// save_cache and restore_cache carry a quantized cache between backends exactly, and a
// byte string that does not fit is refused naming the field.
TEST_F(VulkanVsCpuTest, QuantizedCacheSaveAndRestore) {
  const KvCacheConfig config{.n_seqs = 2, .n_kv_heads = 2, .head_dim = 64, .capacity = 9, .dtype = DType::q4_0, .n_sinks = 1};
  KvCache from = cpu_->kv_cache(config), to = gpu_->kv_cache(config);
  Tensor k = cpu_->tensor({12, 2, 64}, DType::f32);
  cpu_->upload(k, normal(12 * 2 * 64, 91));
  std::vector<std::int32_t> pos(12), seq(12);
  for (std::int32_t i = 0; i < 12; ++i) pos[i] = i, seq[i] = 0;
  CommandList cmd = cpu_->commands();
  cmd.kv_append(from, k, k, pos, seq, {.keep_last = true});
  cmd.submit_and_wait();
  const std::vector<std::uint8_t> saved = cpu_->save_cache(from);
  gpu_->restore_cache(to, saved);
  EXPECT_EQ(gpu_->save_cache(to), saved);
  EXPECT_EQ(to.slot_positions(0), from.slot_positions(0));
  EXPECT_EQ(to.next_position(0), 12);
  KvCache other =
      gpu_->kv_cache({.n_seqs = 2, .n_kv_heads = 2, .head_dim = 64, .capacity = 9, .dtype = DType::q8_0, .n_sinks = 1});
  expect_invalid([&] { gpu_->restore_cache(other, saved); }, {"restore_cache", "config.dtype = q4_0; valid: the cache's q8_0"});
  std::vector<std::uint8_t> cut(saved.begin(), saved.end() - 4);
  expect_invalid([&] { gpu_->restore_cache(to, cut); }, {"restore_cache", "bytes.size()", "what save_cache wrote"});
  std::vector<std::uint8_t> bad = saved;
  bad[64] = 0x7f;  // slot 0 of sequence 0 claims position 127
  expect_invalid([&] { gpu_->restore_cache(to, bad); }, {"restore_cache", "bookkeeping"});
  EXPECT_EQ(gpu_->save_cache(to), saved) << "a refused restore changes nothing";
}

// Every bad argument names the dtype and the limit.
TEST(QuantErrors, BadArguments) {
  auto b = make_backend(BackendKind::cpu);
  expect_invalid([&] { b->tensor({2, 1, 48}, DType::q8_0); }, {"tensor", "shape[2]", "multiple of 32"});
  expect_invalid([&] { b->kv_cache({.n_kv_heads = 1, .head_dim = 48, .capacity = 8, .dtype = DType::q4_0}); },
                 {"kv_cache", "config.head_dim", "multiple of 32 for q4_0"});
  Tensor x = b->tensor({1, 2, 32}, DType::q8_0), q = b->tensor({1, 2, 32}, DType::f32);
  const std::int32_t pos = 0;
  CommandList cmd = b->commands();
  expect_invalid([&] { cmd.rope(x, {&pos, 1}); }, {"rope", "x.dtype", "f32 or f16"});
  Tensor out = b->tensor({1, 2, 32}, DType::f32);
  expect_invalid([&] { cmd.attention(x, q, q, out, {.q_positions = {&pos, 1}}); }, {"attention", "q.dtype", "f32 or f16"});
  KvCache cache = b->kv_cache({.n_kv_heads = 2, .head_dim = 32, .capacity = 8, .dtype = DType::q8_0});
  expect_invalid([&] { cmd.kv_append(cache, x, x, {&pos, 1}); }, {"kv_append", "k.dtype", "f32 or f16"});
  EXPECT_EQ(cache.bytes(), 2u * 8 * 2 * (32 + 2)) << "codes and one f16 scale per 32";
  std::vector<std::uint8_t> wrong(3);
  expect_invalid([&] { b->upload_raw(x, wrong); }, {"upload_raw", "bytes.size()", "tensor.bytes()"});
}

}  // namespace
}  // namespace vkattn::test
