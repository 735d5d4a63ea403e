// Every bad parameter raises InvalidArgument naming the parameter, its value and the valid
// range, on both backends, and leaves the command list unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/backends.hpp"

namespace vkattn::test {
namespace {

using Errors = BackendTest;

// Runs |f|, expects InvalidArgument whose message contains each of |parts|.
template <class F>
void expect_invalid(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected InvalidArgument mentioning " << *parts.begin();
  } catch (const InvalidArgument& e) {
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST_P(Errors, TensorShapes) {
  expect_invalid([&] { backend().tensor({}, DType::f32); }, {"shape", "at least one dimension"});
  expect_invalid([&] { backend().tensor({4, 0, 2}, DType::f32); }, {"shape[1]", "= 0", ">= 1"});
  expect_invalid([&] { backend().tensor({1u << 21, 1u << 21}, DType::f32); }, {"shape", "2^40"});
  expect_invalid([&] { backend().tensor({2}, static_cast<DType>(9)); }, {"dtype", "9"});
}

TEST_P(Errors, Transfers) {
  Tensor f = backend().tensor({2, 3}, DType::f32);
  Tensor i = backend().tensor({6}, DType::i32);
  Tensor empty;
  expect_invalid([&] { backend().upload(f, std::vector<float>(5)); }, {"data.size()", "5", "numel() = 6"});
  expect_invalid([&] { backend().upload(f, std::vector<std::int32_t>(6)); }, {"tensor.dtype", "f32", "i32"});
  expect_invalid([&] { backend().upload(i, std::vector<float>(6)); }, {"tensor.dtype", "i32"});
  expect_invalid([&] { backend().upload(empty, std::vector<float>(1)); }, {"tensor", "empty"});
  expect_invalid([&] { backend().download(i); }, {"tensor.dtype", "download_i32"});
  expect_invalid([&] { backend().download_i32(f); }, {"tensor.dtype", "f32"});
  expect_invalid([&] { (void)empty.shape(); }, {"empty"});

  auto other = make_backend(BackendKind::cpu);
  Tensor foreign = other->tensor({6}, DType::f32);
  expect_invalid([&] { backend().upload(foreign, std::vector<float>(6)); }, {"another backend"});
}

TEST_P(Errors, Rope) {
  Tensor x = backend().tensor({3, 2, 8}, DType::f32);
  const std::vector<std::int32_t> pos{0, 1, 2};
  CommandList cmd = backend().commands();
  auto rope = [&](Tensor& t, std::vector<std::int32_t> p, RopeConfig c) { cmd.rope(t, p, c); };

  Tensor rank2 = backend().tensor({3, 8}, DType::f32);
  expect_invalid([&] { rope(rank2, pos, {}); }, {"x.shape", "[3, 8]", "rank 3"});
  Tensor ints = backend().tensor({3, 2, 8}, DType::i32);
  expect_invalid([&] { rope(ints, pos, {}); }, {"x.dtype", "i32", "f32 or f16"});
  Tensor odd = backend().tensor({3, 2, 7}, DType::f32);
  expect_invalid([&] { rope(odd, pos, {}); }, {"head_dim", "7", "even"});
  Tensor wide = backend().tensor({1, 1, kMaxHeadDim + 2}, DType::f32);
  expect_invalid([&] { rope(wide, {0}, {}); }, {"head_dim", "2050", "2048"});
  expect_invalid([&] { rope(x, {0, 1}, {}); }, {"positions.size()", "2", "n_tokens", "3"});
  expect_invalid([&] { rope(x, {0, -5, 2}, {}); }, {"positions[1]", "-5", "2^31"});
  expect_invalid([&] { rope(x, pos, {.rotary_dim = 3}); }, {"rotary_dim", "3", "even"});
  expect_invalid([&] { rope(x, pos, {.rotary_dim = 10}); }, {"rotary_dim", "10", "head_dim = 8"});
  for (double base : {0.0, -2.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    expect_invalid([&] { rope(x, pos, {.base = base}); }, {"config.base", "finite and > 0"});
  }
  expect_invalid([&] { rope(x, pos, {.layout = static_cast<RopeLayout>(5)}); }, {"config.layout", "5"});
  Tensor empty;
  expect_invalid([&] { rope(empty, pos, {}); }, {"x", "empty"});
  auto other = make_backend(BackendKind::cpu);
  Tensor foreign = other->tensor({3, 2, 8}, DType::f32);
  expect_invalid([&] { rope(foreign, pos, {}); }, {"another backend"});

  // Scaling parameters.
  const auto yarn = [](auto edit) {
    RopeConfig c{.scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 4096};
    edit(c);
    return c;
  };
  for (double f : {0.0, -1.0, std::nan("")}) {
    expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::linear, .factor = f}); }, {"config.factor", "> 0"});
  }
  expect_invalid([&] { rope(x, pos, {.scaling = static_cast<RopeScaling>(42)}); }, {"config.scaling", "42"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::yarn, .factor = 4.0}); },
                 {"config.original_context", "0", ">= 1"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::llama3, .factor = 8.0}); }, {"original_context"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::dynamic_ntk, .factor = 2.0}); }, {"original_context"});
  expect_invalid([&] { rope(x, pos, {.rotary_dim = 2, .scaling = RopeScaling::ntk, .factor = 2.0}); },
                 {"config.rotary_dim", "2", ">= 4"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.yarn.beta_fast = 0.5; })); },
                 {"config.yarn.beta_fast", "0.5", "> config.yarn.beta_slow = 1"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.yarn.beta_slow = -1; })); },
                 {"config.yarn.beta_slow", "-1"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.yarn.mscale = std::nan(""); })); },
                 {"config.yarn.mscale", ">= 0"});
  expect_invalid(
      [&] {
        RopeConfig c{.scaling = RopeScaling::llama3, .factor = 8.0, .original_context = 8192};
        c.llama3.high_freq_factor = 1.0;
        rope(x, pos, c);
      },
      {"config.llama3.high_freq_factor", "> config.llama3.low_freq_factor"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::factors, .freq_factors = {1, 2, 3}}); },
                 {"config.freq_factors.size()", "3", "rotary_dim / 2 = 4"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::factors, .freq_factors = {1, 2, 0, 4}}); },
                 {"config.freq_factors[2]", "0", "> 0"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::factors, .freq_factors = {1, 2, INFINITY, 4}}); },
                 {"config.freq_factors[2]", "inf"});
  expect_invalid([&] { rope(x, pos, {.freq_factors = {1, 2, 3, 4}}); },
                 {"config.freq_factors.size()", "0 unless"});
  expect_invalid([&] { rope(x, pos, {.attention_factor = 0.0}); }, {"config.attention_factor", "> 0"});
  expect_invalid([&] { rope_frequencies({}, 7); }, {"config.rotary_dim"});
  expect_invalid([&] { rope_frequencies({}, 8, -1); }, {"max_position", "-1"});

  // Q and K together.
  Tensor k = backend().tensor({3, 1, 8}, DType::f32);
  Tensor k_tokens = backend().tensor({4, 1, 8}, DType::f32);
  Tensor k_dim = backend().tensor({3, 1, 6}, DType::f32);
  Tensor k_f16 = backend().tensor({3, 1, 8}, DType::f16);
  expect_invalid([&] { cmd.rope(x, k_tokens, pos); }, {"k.shape[0]", "4", "n_tokens = q.shape[0] = 3"});
  expect_invalid([&] { cmd.rope(x, k_dim, pos); }, {"k.shape[2]", "6", "head_dim = q.shape[2] = 8"});
  expect_invalid([&] { cmd.rope(x, k_f16, pos); }, {"k.dtype", "f16", "q.dtype = f32"});
  expect_invalid([&] { cmd.rope(x, x, pos); }, {"k", "the same tensor as q"});
  expect_invalid([&] { cmd.rope(x, empty, pos); }, {"k", "empty"});
  expect_invalid([&] { cmd.rope(x, k, std::vector<std::int32_t>{0, 1}); }, {"positions.size()", "q.shape[0]"});

  // Nothing was recorded, and the list still works.
  EXPECT_EQ(cmd.stats().ops, 0u);
  rope(x, pos, {});
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().ops, 1u);
}

TEST_P(Errors, Copy) {
  Tensor a = backend().tensor({4}, DType::f32), b = backend().tensor({5}, DType::f32);
  Tensor h = backend().tensor({4}, DType::f16);
  CommandList cmd = backend().commands();
  expect_invalid([&] { cmd.copy(a, b); }, {"dst.numel()", "5", "4"});
  expect_invalid([&] { cmd.copy(a, h); }, {"dst.dtype", "f16", "f32"});
  EXPECT_EQ(cmd.stats().ops, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Errors, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// Device limits: a tensor past maxStorageBufferRange, timestamps a device lacks.
TEST(VulkanErrors, DeviceLimits) {
  DeviceOptions options = test_options();
  DeviceLimits cap = spec_minimum_limits();
  cap.max_storage_buffer_range = 1 << 20;
  cap.timestamps = false;
  options.cap_limits = cap;
  std::string why;
  auto b = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(b, why);
  try {
    b->tensor({1 << 18, 2}, DType::f32);
    ADD_FAILURE() << "expected Error(out_of_memory)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("maxStorageBufferRange"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1048576"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(b->tensor({1 << 18}, DType::f32));
  try {
    b->commands({.timestamps = true});
    ADD_FAILURE() << "expected Error(unsupported)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
  }
  for (const auto& m : b->validation_messages()) ADD_FAILURE() << "validation: " << m;
}

TEST(VulkanErrors, MakeBackendKind) {
  EXPECT_THROW(make_backend(static_cast<BackendKind>(7)), InvalidArgument);
}

}  // namespace
}  // namespace vkattn::test
