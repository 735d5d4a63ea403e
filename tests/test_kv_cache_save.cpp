// Backend::restore_cache against bytes save_cache could not have written: each refused by
// name, changing nothing (round trips of every cache kind are with each kind's tests:
// test_kv_cache.cpp's ResetAndCopySequence, test_kv_cache_paged.cpp's SaveRestore, the
// MLA and quantized tests).
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "support/kv_model.hpp"

namespace vkattn::test {
namespace {

std::int32_t word(const std::vector<std::uint8_t>& b, std::size_t at) {
  std::int32_t x;
  std::memcpy(&x, b.data() + at, 4);
  return x;
}

// restore_cache refuses bookkeeping the cache could not have written (attention and
// truncate trust it): an oldest position other than max(n_sinks, next - ring) (lower, the
// refusal of keys the ring overwrote is skipped), a next position past the newest held
// plus one, a hole in the positions held, or a position an append has overwritten.
TEST(KvCacheSave, BookkeepingItCouldNotHaveWritten) {
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 8, .capacity = 4, .dtype = DType::f32};
  KvCache cache = cpu->kv_cache(config);
  const Tensor k = cpu->tensor({3, 1, 8}, DType::f32), v = cpu->tensor({3, 1, 8}, DType::f32);
  CommandList cmd = cpu->commands();
  cmd.kv_append(cache, k, v, Ids{0, 1, 2});
  cmd.kv_append(cache, k, v, Ids{3, 4, 5});
  cmd.submit_and_wait();
  const std::vector<std::uint8_t> saved = cpu->save_cache(cache);
  // The version-1 layout: a 64-byte header, 4 slot positions, next, oldest.
  ASSERT_EQ(word(saved, 80), 6);  // next
  ASSERT_EQ(word(saved, 84), 2);  // oldest: the ring holds 2..5
  KvCache other = cpu->kv_cache(config);
  for (std::int32_t oldest : {7, 3, 1, 0}) {
    std::vector<std::uint8_t> bad = saved;
    std::memcpy(bad.data() + 84, &oldest, 4);
    expect_invalid([&] { cpu->restore_cache(other, bad); }, {"sequence 0 bookkeeping", "inconsistent"});
  }
  for (std::int32_t next : {7, 259}) {
    std::vector<std::uint8_t> bad = saved;
    std::memcpy(bad.data() + 80, &next, 4);
    expect_invalid([&] { cpu->restore_cache(other, bad); }, {"sequence 0 bookkeeping", "inconsistent"});
  }
  // Slots 0..3 hold 4, 5, 2, 3 (bytes 64 to 79): a hole at 2; 0 (overwritten by 4) with
  // oldest 0 to match.
  for (auto [at, value, oldest] : {std::tuple{72, -1, 2}, std::tuple{64, 0, 0}}) {
    std::vector<std::uint8_t> bad = saved;
    std::memcpy(bad.data() + at, &value, 4);
    std::memcpy(bad.data() + 84, &oldest, 4);
    expect_invalid([&] { cpu->restore_cache(other, bad); }, {"sequence 0 bookkeeping", "inconsistent"});
  }
  EXPECT_EQ(other.next_position(0), 0);  // each refusal changed nothing
  cpu->restore_cache(other, saved);
  EXPECT_EQ(other.slot_positions(0), cache.slot_positions(0));
  // So the ring's refusals hold after a restore as before it: position 1 is overwritten.
  expect_invalid([&] { other.truncate(0, 1); }, {"position = 1", "have been overwritten"});
}

// Bytes that are no save of this cache's kind, and caches no save can come from or go to,
// are refused by name.
TEST(KvCacheSave, HeadersAndCachesItCouldNotHaveWritten) {
  auto cpu = make_backend(BackendKind::cpu), other_backend = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 8, .capacity = 4, .dtype = DType::f32};
  KvCache cache = cpu->kv_cache(config);
  const std::vector<std::uint8_t> saved = cpu->save_cache(cache);
  ASSERT_EQ(word(saved, 8), 1);  // the format version, after the 8-byte magic
  std::vector<std::uint8_t> bad = saved;
  bad[0] = 'V';
  for (const auto& bytes : {std::vector<std::uint8_t>{}, std::vector<std::uint8_t>(saved.begin(), saved.begin() + 63), bad}) {
    expect_invalid([&] { cpu->restore_cache(cache, bytes); }, {"restore_cache: bytes = not a saved cache"});
  }
  bad = saved;
  bad[8] = 4;
  expect_invalid([&] { cpu->restore_cache(cache, bad); }, {"bytes: format version = 4", "1, 2 (latent) or 3 (paged)"});
  bad = saved;
  bad[40] = 2;  // n_kv_heads (u64 at 40: after n_seqs and capacity)
  expect_invalid([&] { cpu->restore_cache(cache, bad); }, {"bytes: config.n_kv_heads = 2", "the cache's 1"});

  KvCache moved = std::move(cache);
  expect_invalid([&] { (void)cpu->save_cache(cache); }, {"save_cache: cache = an empty KvCache", "moved-from"});
  expect_invalid([&] { cpu->restore_cache(cache, saved); }, {"restore_cache: cache = an empty KvCache", "moved-from"});
  expect_invalid([&] { (void)other_backend->save_cache(moved); }, {"save_cache: cache = a cache of another backend"});
  expect_invalid([&] { other_backend->restore_cache(moved, saved); }, {"restore_cache: cache = a cache of another backend"});
  cpu->restore_cache(moved, saved);
}

// A sequence at position 2^31 - 1 takes no more keys (its next would pass int32): restored
// holding 2^31 - 5 .. 2^31 - 2, each in slot position % 4, its append is refused.
TEST(KvCacheSave, NoPositionPastTheLast) {
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 8, .capacity = 4, .dtype = DType::f32};
  KvCache cache = cpu->kv_cache(config);
  std::vector<std::uint8_t> bytes = cpu->save_cache(cache);
  constexpr std::int32_t last = INT32_MAX;
  for (std::int32_t p = last - 4; p < last; ++p) std::memcpy(bytes.data() + 64 + 4 * (p % 4), &p, 4);
  for (auto [at, value] : {std::pair{80, last}, {84, last - 4}}) std::memcpy(bytes.data() + at, &value, 4);
  cpu->restore_cache(cache, bytes);
  EXPECT_EQ(cache.next_position(0), last);
  EXPECT_EQ(cache.slot_positions(0), (Ids{last - 3, last - 2, last - 1, last - 4}));
  const Tensor k = cpu->tensor({1, 1, 8}, DType::f32);
  CommandList cmd = cpu->commands();
  expect_invalid([&] { cmd.kv_append(cache, k, k, Ids{last}); }, {"kv_append: positions[0] = 2147483647", "< 2^31 - 1"});
  EXPECT_EQ(cmd.stats().ops, 0u);
}

// A paged save (version 3) cut inside its own 16-byte header is refused by its size, not
// by zeros read as its block size or latent word; that word is 0 or 1, as written.
TEST(KvCacheSave, PagedHeaders) {
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{
      .n_kv_heads = 1, .head_dim = 8, .capacity = 4, .dtype = DType::f32, .paged = true, .block_size = 2, .n_blocks = 2};
  KvCache cache = cpu->kv_cache(config);
  const std::vector<std::uint8_t> saved = cpu->save_cache(cache);
  ASSERT_EQ(word(saved, 64), 2);  // block_size (u64), then latent (u32) and blocks saved
  for (std::size_t size : {64, 79}) {
    const std::vector<std::uint8_t> cut(saved.begin(), saved.begin() + static_cast<std::ptrdiff_t>(size));
    expect_invalid([&] { cpu->restore_cache(cache, cut); },
                   {("bytes.size() = " + std::to_string(size)).c_str(), ">= 80 (a paged save's headers)"});
  }
  std::vector<std::uint8_t> bad = saved;
  const std::int32_t seven = 7;
  std::memcpy(bad.data() + 72, &seven, 4);
  expect_invalid([&] { cpu->restore_cache(cache, bad); }, {"config.latent = 7", "the cache's 0"});
  cpu->restore_cache(cache, saved);
}

// A block two sequences share (a fork's) sits at one run of both tables, each row holding
// one position: tables naming it at different runs, or a row at two positions, are
// refused (sequence 1 read sequence 0's rows of other positions).
TEST(KvCacheSave, SharedBlocksAtOneRun) {
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_seqs = 2,
                             .n_kv_heads = 1,
                             .head_dim = 8,
                             .capacity = 4,
                             .dtype = DType::f32,
                             .paged = true,
                             .block_size = 2,
                             .n_blocks = 8};
  KvCache cache = cpu->kv_cache(config);
  const Tensor k = cpu->tensor({4, 1, 8}, DType::f32);
  CommandList cmd = cpu->commands();
  cmd.kv_append(cache, k, k, Ids{0, 1, 2, 3}, Ids{0, 0, 0, 0});
  cmd.kv_copy_sequence(cache, 0, 1);  // sequence 1 shares block 1 (run 1), copies run 0's, written next
  cmd.submit_and_wait();
  const std::vector<std::uint8_t> saved = cpu->save_cache(cache);
  // Headers (64 + 16 bytes), 2 x 4 slot words, next and oldest of each, then the tables.
  const std::size_t slots1 = 80 + 16, next1 = 80 + 32 + 4, oldest1 = next1 + 8, tables = 80 + 48, seq1 = tables + 8;
  ASSERT_NE(word(saved, seq1), word(saved, tables));
  ASSERT_EQ(word(saved, seq1 + 4), word(saved, tables + 4));
  KvCache other = cpu->kv_cache(config);
  std::vector<std::uint8_t> swapped = saved;  // sequence 1's two runs exchanged
  std::memcpy(swapped.data() + seq1, saved.data() + seq1 + 4, 4);
  std::memcpy(swapped.data() + seq1 + 4, saved.data() + seq1, 4);
  expect_invalid([&] { cpu->restore_cache(other, swapped); }, {"sequence 1 bookkeeping", "inconsistent"});
  // Sequence 1 as if it had gone on to 7 writing the shared block in place: its ring (4, 5,
  // 6, 7) is consistent alone, but the shared block's rows would hold 2 and 6, 3 and 7.
  std::vector<std::uint8_t> wrapped = saved;
  for (auto [at, value] : {std::pair{slots1, 4}, {slots1 + 4, 5}, {slots1 + 8, 6}, {slots1 + 12, 7}, {next1, 8}, {oldest1, 4}}) {
    std::memcpy(wrapped.data() + at, &value, 4);
  }
  expect_invalid([&] { cpu->restore_cache(other, wrapped); }, {"sequence 1 bookkeeping", "inconsistent"});
  EXPECT_EQ(other.next_position(1), 0);
  cpu->restore_cache(other, saved);
  EXPECT_EQ(other.block_table(1), cache.block_table(1));
}

}  // namespace
}  // namespace vkattn::test
