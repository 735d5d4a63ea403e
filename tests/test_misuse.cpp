// Misuse that an engine meets in its first week: handles used after a move, outputs that
// alias inputs, sinks given to the stage that cannot use them, head counts no slope table
// can serve. Each is InvalidArgument naming the op and the object, on both backends, and
// leaves what was recorded unchanged.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "support/backends.hpp"
#include "support/expect_invalid.hpp"

namespace vkattn::test {
namespace {

using Misuse = BackendTest;

// Every CommandList member on a moved-from list (it dereferenced null).
TEST_P(Misuse, MovedFromCommandList) {
  Backend& b = backend();
  Tensor q = b.tensor({2, 2, 8}, DType::f32), k = b.tensor({4, 1, 8}, DType::f32), v = b.tensor({4, 1, 8}, DType::f32);
  Tensor s = b.tensor({2, 2, 4}, DType::f32), out = b.tensor({2, 2, 8}, DType::f32);
  KvCache cache = b.kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 4});
  const std::vector<std::int32_t> qp{3, 3}, kp{0, 1, 2, 3};
  CommandList cmd = b.commands();
  CommandList taker = std::move(cmd);
  const std::initializer_list<const char*> named = {"this = a moved-from CommandList", "Backend::commands"};
  expect_invalid([&] { cmd.copy(k, v); }, named);
  expect_invalid([&] { cmd.rope(q, qp); }, named);
  expect_invalid([&] { cmd.rope(q, k, std::vector<std::int32_t>{1, 2}); }, named);
  expect_invalid([&] { cmd.attn_scores(q, k, s, {qp, kp}); }, named);
  expect_invalid([&] { cmd.attn_softmax(s, s); }, named);
  expect_invalid([&] { cmd.attn_weighted_sum(s, v, out); }, named);
  expect_invalid([&] { cmd.kv_append(cache, k, v, kp); }, named);
  expect_invalid([&] { cmd.kv_copy_sequence(cache, 0, 0); }, named);
  expect_invalid([&] { cmd.attn_scores(q, cache, s, {.q_positions = qp}); }, named);
  expect_invalid([&] { cmd.attn_weighted_sum(s, cache, out); }, named);
  expect_invalid([&] { cmd.attention(q, k, v, out, {qp, kp}); }, named);
  expect_invalid([&] { cmd.attention(q, cache, out, {.q_positions = qp}); }, named);
  expect_invalid([&] { cmd.submit_and_wait(); }, {"submit_and_wait: this = a moved-from CommandList"});
  expect_invalid([&] { (void)cmd.stats(); }, {"stats: this = a moved-from CommandList"});
  expect_invalid([&] { (void)cmd.timings(); }, {"timings: this = a moved-from CommandList"});
  // The list it moved into works; assigning a new list revives the moved-from one.
  taker.copy(k, v);
  taker.submit_and_wait();
  cmd = b.commands();
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().submits, 1u);
}

TEST_P(Misuse, MovedFromTensorAndCache) {
  Backend& b = backend();
  Tensor x = b.tensor({2, 1, 8}, DType::f32);
  Tensor y = std::move(x);
  CommandList cmd = b.commands();
  expect_invalid([&] { cmd.rope(x, std::vector<std::int32_t>{1, 2}); }, {"rope: x = an empty Tensor", "moved-from"});
  expect_invalid([&] { cmd.copy(y, x); }, {"copy: dst = an empty Tensor", "moved-from"});
  expect_invalid([&] { b.upload(x, std::vector<float>(16)); }, {"upload: tensor = an empty Tensor", "moved-from"});
  expect_invalid([&] { (void)b.download(x); }, {"download: tensor = an empty Tensor"});
  expect_invalid([&] { (void)x.shape(); }, {"tensor: this = an empty Tensor"});

  KvCache cache = b.kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 4});
  KvCache other = std::move(cache);
  Tensor k = b.tensor({1, 1, 8}, DType::f32), v = b.tensor({1, 1, 8}, DType::f32);
  expect_invalid([&] { cmd.kv_append(cache, k, v, std::vector<std::int32_t>{0}); },
                 {"kv_append: cache = an empty KvCache", "moved-from"});
  expect_invalid([&] { (void)cache.next_position(0); }, {"next_position: this = an empty KvCache", "moved-from"});
  expect_invalid([&] { cache.reset(0); }, {"reset: this = an empty KvCache"});
  expect_invalid([&] { cache.truncate(0, 0); }, {"truncate: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.slot_positions(0); }, {"slot_positions: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.length(0); }, {"length: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.config(); }, {"config: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.bytes(); }, {"bytes: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.slot(0); }, {"slot: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.free_blocks(); }, {"free_blocks: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.block_table(0); }, {"block_table: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.blocks_to_append(0, 1); }, {"blocks_to_append: this = an empty KvCache"});
  expect_invalid([&] { (void)cache.block_refs(); }, {"block_refs: this = an empty KvCache"});
  cmd.kv_append(other, k, v, std::vector<std::int32_t>{0});
  cmd.submit_and_wait();
  EXPECT_EQ(other.next_position(0), 1);
}

// An op's output may not be one of its inputs: inside one dispatch that is a read/write
// race on a GPU. Softmax alone works in place (and rope, whose only tensor is both).
TEST_P(Misuse, OutputsMayNotAliasInputs) {
  Backend& b = backend();
  // Shapes chosen so that each alias passes the shape checks: n_keys = head_dim = 8.
  Tensor q = b.tensor({8, 1, 8}, DType::f32), k = b.tensor({8, 1, 8}, DType::f32), v = b.tensor({8, 1, 8}, DType::f32);
  Tensor p = b.tensor({8, 1, 8}, DType::f32), mask = b.tensor({8, 8}, DType::f32);
  const std::vector<std::int32_t> pos{0, 1, 2, 3, 4, 5, 6, 7};
  const AttentionTokens tok{pos, pos};
  CommandList cmd = b.commands();
  expect_invalid([&] { cmd.copy(q, q); }, {"copy: dst = the tensor given as src"});
  expect_invalid([&] { cmd.attn_scores(q, k, q, tok); }, {"attn_scores: scores = the tensor given as q"});
  expect_invalid([&] { cmd.attn_scores(q, k, k, tok); }, {"attn_scores: scores = the tensor given as k"});
  expect_invalid([&] { cmd.attn_weighted_sum(p, v, v); }, {"attn_weighted_sum: out = the tensor given as v"});
  expect_invalid([&] { cmd.attn_weighted_sum(p, v, p); }, {"attn_weighted_sum: out = the tensor given as probs"});
  for (Tensor* alias : {&q, &k, &v}) {
    expect_invalid([&] { cmd.attention(q, k, v, *alias, tok); }, {"attention: out = the tensor given as"});
  }
  KvCache cache = b.kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 8});
  expect_invalid([&] { cmd.attn_scores(q, cache, q, {.q_positions = pos}); }, {"attn_scores: scores = the tensor given as q"});
  expect_invalid([&] { cmd.attention(q, cache, q, {.q_positions = pos}); }, {"attention: out = the tensor given as q"});
  EXPECT_EQ(cmd.stats().ops, 0u);
  // Inputs may alias each other, and softmax may work in place.
  cmd.attn_scores(q, q, p, tok, {}, &mask);
  cmd.attn_softmax(p, p);
  cmd.attn_weighted_sum(p, q, v);
  cmd.submit_and_wait();
}

// attn_scores refuses sinks (they enter the softmax): a config given to attn_scores but not
// attn_softmax lost them silently. attn_softmax and attention take them.
TEST_P(Misuse, SinksBelongToTheSoftmax) {
  Backend& b = backend();
  Tensor q = b.tensor({1, 2, 8}, DType::f32), k = b.tensor({3, 1, 8}, DType::f32), s = b.tensor({1, 2, 3}, DType::f32);
  Tensor out = b.tensor({1, 2, 8}, DType::f32);
  const std::vector<std::int32_t> qp{2}, kp{0, 1, 2};
  const AttentionConfig with_sinks{.sinks = {0.5f, -1.0f}};
  KvCache cache = b.kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 3});
  CommandList cmd = b.commands();
  expect_invalid(
      [&] {
        cmd.attn_scores(q, k, s, {qp, kp}, with_sinks);
      },
      {"attn_scores: config.sinks.size() = 2", "give them to attn_softmax"});
  expect_invalid([&] { cmd.attn_scores(q, cache, s, {.q_positions = qp}, with_sinks); },
                 {"attn_scores: config.sinks.size() = 2"});
  EXPECT_EQ(cmd.stats().ops, 0u);
  cmd.attn_scores(q, k, s, {qp, kp});
  cmd.attn_softmax(s, s, with_sinks);
  cmd.attention(q, k, k, out, {qp, kp}, with_sinks);
  cmd.submit_and_wait();
}

// alibi_slopes(SIZE_MAX) looped for ever (its power-of-two search overflowed).
TEST_P(Misuse, AlibiHeadCounts) {
  expect_invalid([] { alibi_slopes(std::numeric_limits<std::size_t>::max()); }, {"alibi_slopes: n_heads", "[0, 65536]"});
  expect_invalid([] { alibi_slopes(65537); }, {"alibi_slopes: n_heads = 65537"});
  EXPECT_EQ(alibi_slopes(65536).size(), 65536u);
  EXPECT_TRUE(alibi_slopes(0).empty());
  Backend& b = backend();
  Tensor q = b.tensor({1, 65537, 2}, DType::f32), k = b.tensor({1, 1, 2}, DType::f32);
  Tensor s = b.tensor({1, 65537, 1}, DType::f32);
  const std::vector<std::int32_t> zero{0};
  CommandList cmd = b.commands();
  expect_invalid(
      [&] {
        cmd.attn_scores(q, k, s, {zero, zero}, {.alibi = true});
      },
      {"attn_scores: config.alibi = true with n_heads = 65537", "per-head config.alibi_slopes"});
}

// A backend made after another is destroyed (often at the same address) does not take
// the first one's tensors, caches and lists for its own: they name what made them.
TEST(MisuseOwners, ObjectsOutliveTheirBackendButNotIntoTheNextOne) {
  for (int round = 0; round < 8; ++round) {
    auto first = make_backend(BackendKind::cpu);
    Tensor old = first->tensor({2, 4}, DType::f32);
    KvCache cache = first->kv_cache({.n_kv_heads = 1, .head_dim = 4, .capacity = 2, .dtype = DType::f32});
    CommandList list = first->commands();
    first.reset();
    auto second = make_backend(BackendKind::cpu);
    expect_invalid([&] { (void)second->download(old); }, {"download", "a tensor of another backend"});
    expect_invalid([&] { (void)second->save_cache(cache); }, {"save_cache", "a cache of another backend"});
    Tensor mine = second->tensor({2, 4}, DType::f32);
    expect_invalid([&] { list.copy(mine, old); }, {"copy", "a tensor of another backend"});
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Misuse, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

}  // namespace
}  // namespace vkattn::test
