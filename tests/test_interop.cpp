// Bring your own Vulkan (vkattn/vulkan.hpp): an engine with its own instance, device,
// queue, buffers and command buffers (support/engine.hpp) runs vkattn's RoPE, kv_append
// and attention inside its own command buffer, between its own copies, on its own buffers;
// the results match the CPU backend, and the validation layer (synchronization validation
// included) reports nothing, also when the engine destroys everything it made after
// vkattn is gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/interop.hpp"
#include "support/random.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kTokens = 3, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kCapacity = 8;

// One chunk on |b|: rope on q and k, append, attention, run by |submit|. The output, and k
// as rotated (what the cache holds).
struct Chunk {
  std::vector<float> out, roped_k;
};
Chunk run_chunk(Backend& b, KvCache& cache, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                const std::vector<std::int32_t>& positions, const std::function<void(CommandList&)>& submit) {
  const std::size_t n = positions.size();
  Tensor tq = b.tensor({n, kHeads, kHeadDim}, DType::f32), tk = b.tensor({n, kKvHeads, kHeadDim}, DType::f32);
  Tensor tv = b.tensor({n, kKvHeads, kHeadDim}, DType::f32), out = b.tensor({n, kHeads, kHeadDim}, DType::f32);
  b.upload(tq, q);
  b.upload(tk, k);
  b.upload(tv, v);
  CommandList cmd = b.commands();
  cmd.rope(tq, tk, positions);
  cmd.kv_append(cache, tk, tv, positions);
  cmd.attention(tq, cache, out, {.q_positions = positions});
  submit(cmd);
  return {b.download(out), b.download(tk)};
}

// The CPU backend's output for one chunk.
std::vector<float> reference(Backend& cpu, KvCache& cache, const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<std::int32_t>& positions) {
  return run_chunk(cpu, cache, q, k, v, positions, [](CommandList& cmd) { cmd.submit_and_wait(); }).out;
}

// The same chunk on |gpu|, recorded into the engine's command buffer.
Chunk engine_chunk(Engine& e, Backend& gpu, KvCache& cache, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<std::int32_t>& positions) {
  return run_chunk(gpu, cache, q, k, v, positions, [&](CommandList& cmd) {
    VkCommandBuffer cb = e.begin();
    cmd.record(cb, {.dst_stage_mask = VK_PIPELINE_STAGE_HOST_BIT, .dst_access_mask = VK_ACCESS_HOST_READ_BIT});
    e.submit_and_wait(cb);
  });
}

// A prefill chunk recorded into the engine's command buffer between its copies, the same
// list recorded again, and a decode step; |force_staging|: vkattn's own tensors and op
// parameters behind staging copies (the parameters then reach the device by a copy
// recorded into the engine's command buffer), as on a discrete GPU.
void chunk_then_step(Engine& e, bool force_staging) {
  DeviceOptions options = interop_options();
  options.force_staging = force_staging;
  auto gpu = make_backend(external(e), options);
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity};
  KvCache cache = gpu->kv_cache(config), ref_cache = cpu->kv_cache(config);

  // Q, K and V in one device-local buffer at aligned offsets, filled from the engine's
  // staging buffer by its own copy; the output device-local, read back by its own copy;
  // a second V in host-visible memory, wrapped as it is.
  // (vkattn's own alignment may be larger: VKATTN_CAP_LIMITS=spec_minimum plans with 256.)
  const VkDeviceSize align =
      std::max<VkDeviceSize>({e.limits().minStorageBufferOffsetAlignment, 16, gpu->limits().storage_offset_alignment});
  auto round = [&](VkDeviceSize b) { return (b + align - 1) / align * align; };
  const VkDeviceSize q_bytes = kTokens * kHeads * kHeadDim * 4, kv_bytes = kTokens * kKvHeads * kHeadDim * 4;
  const VkDeviceSize q_off = 0, k_off = round(q_bytes), v_off = k_off + round(kv_bytes), total = v_off + round(kv_bytes);
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  EngineBuffer staging = e.buffer(total, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, true);
  // (TRANSFER_SRC too: the decode step below downloads from it through vkattn.)
  EngineBuffer qkv = e.buffer(total, storage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, false);
  EngineBuffer out = e.buffer(q_bytes, storage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, false);
  EngineBuffer readback = e.buffer(q_bytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT, true);

  Tensor q = wrap(*gpu, qkv.buffer, q_off, q_bytes, {kTokens, kHeads, kHeadDim}, DType::f32);
  Tensor k = wrap(*gpu, qkv.buffer, k_off, kv_bytes, {kTokens, kKvHeads, kHeadDim}, DType::f32);
  Tensor v = wrap(*gpu, qkv.buffer, v_off, kv_bytes, {kTokens, kKvHeads, kHeadDim}, DType::f32);
  Tensor o = wrap(*gpu, out.buffer, 0, q_bytes, {kTokens, kHeads, kHeadDim}, DType::f32);

  const auto qv = normal(kTokens * kHeads * kHeadDim, 1), kvals = normal(kTokens * kKvHeads * kHeadDim, 2),
             vv = normal(kTokens * kKvHeads * kHeadDim, 3);
  auto* bytes = static_cast<std::uint8_t*>(staging.mapped);
  std::memcpy(bytes + q_off, qv.data(), q_bytes);
  std::memcpy(bytes + k_off, kvals.data(), kv_bytes);
  std::memcpy(bytes + v_off, vv.data(), kv_bytes);

  const std::vector<std::int32_t> positions = {0, 1, 2};
  CommandList cmd = gpu->commands();
  cmd.rope(q, k, positions);
  cmd.kv_append(cache, k, v, positions);
  cmd.attention(q, cache, o, {.q_positions = positions});

  // The engine's command buffer: its copy in, vkattn's dispatches, its copy out. vkattn's
  // entry barrier orders the copy in; its exit barrier, asked for transfer reads, the copy
  // out; the engine's own barrier makes the copy visible to the host.
  auto record = [&] {
    VkCommandBuffer cb = e.begin();
    Engine::copy(cb, staging, 0, qkv, 0, total);
    cmd.record(cb, {.dst_stage_mask = VK_PIPELINE_STAGE_TRANSFER_BIT, .dst_access_mask = VK_ACCESS_TRANSFER_READ_BIT});
    Engine::copy(cb, out, 0, readback, 0, q_bytes);
    Engine::barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                    VK_ACCESS_HOST_READ_BIT);
    return cb;
  };
  auto result = [&] {
    std::vector<float> got(kTokens * kHeads * kHeadDim);
    std::memcpy(got.data(), readback.mapped, q_bytes);
    return got;
  };
  const std::vector<float> want = reference(*cpu, ref_cache, qv, kvals, vv, positions);
  VkCommandBuffer first = record();
  e.submit_and_wait(first);
  EXPECT_TRUE(all_close(result(), want, {kTokens, kHeads, kHeadDim}, 1e-5, 1e-4));

  // The same list recorded into a second command buffer runs the same ops again (rope in
  // place on Q restored by the copy in; kv_append rewriting the same slots): the same
  // result. And the first command buffer submitted again, as engines do every frame.
  std::memset(readback.mapped, 0, q_bytes);
  VkCommandBuffer second = record();
  e.submit_and_wait(second);
  EXPECT_TRUE(all_close(result(), want, {kTokens, kHeads, kHeadDim}, 1e-5, 1e-4));
  std::memset(readback.mapped, 0, q_bytes);
  e.resubmit_and_wait(first);
  EXPECT_TRUE(all_close(result(), want, {kTokens, kHeads, kHeadDim}, 1e-5, 1e-4));

  // A decode step in another list, on a host-visible V the engine wrote directly, and
  // upload/download through vkattn on the wrapped device-local tensors.
  EngineBuffer host_v = e.buffer(round(kKvHeads * kHeadDim * 4), storage, true);
  const auto q1 = normal(kHeads * kHeadDim, 4), k1 = normal(kKvHeads * kHeadDim, 5), v1 = normal(kKvHeads * kHeadDim, 6);
  std::memcpy(host_v.mapped, v1.data(), v1.size() * 4);
  Tensor dq = wrap(*gpu, qkv.buffer, q_off, q_bytes / kTokens, {1, kHeads, kHeadDim}, DType::f32);
  Tensor dk = wrap(*gpu, qkv.buffer, k_off, round(kv_bytes / kTokens), {1, kKvHeads, kHeadDim}, DType::f32);
  Tensor dv = wrap(*gpu, host_v.buffer, 0, host_v.size, {1, kKvHeads, kHeadDim}, DType::f32);
  Tensor dout = wrap(*gpu, out.buffer, 0, q_bytes / kTokens, {1, kHeads, kHeadDim}, DType::f32);
  gpu->upload(dq, q1);
  gpu->upload(dk, k1);
  EXPECT_EQ(gpu->download(dk), k1);
  const std::vector<std::int32_t> next = {3};
  CommandList step = gpu->commands();
  step.rope(dq, dk, next);
  step.kv_append(cache, dk, dv, next);
  step.attention(dq, cache, dout, {.q_positions = next});
  VkCommandBuffer cb = e.begin();
  step.record(cb, {.dst_stage_mask = VK_PIPELINE_STAGE_TRANSFER_BIT, .dst_access_mask = VK_ACCESS_TRANSFER_READ_BIT});
  e.submit_and_wait(cb);
  EXPECT_TRUE(all_close(gpu->download(dout), reference(*cpu, ref_cache, q1, k1, v1, next), {1, kHeads, kHeadDim}, 1e-5, 1e-4));
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

TEST_F(Interop, RecordsIntoTheEnginesCommandBufferOnItsBuffers) { chunk_then_step(engine(), false); }

TEST_F(Interop, RecordsIntoTheEnginesCommandBufferBehindStagingCopies) { chunk_then_step(engine(), true); }

TEST_F(Interop, KvCacheInTheEnginesBuffers) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity, .dtype = DType::f32};
  const Shape shape = {1, kCapacity, kKvHeads, kHeadDim};
  const VkDeviceSize bytes = kCapacity * kKvHeads * kHeadDim * 4;
  // K and V in one host-visible buffer the engine can read, starting dirty: vkattn zeroes it.
  const VkDeviceSize align =
      std::max<VkDeviceSize>({e.limits().minStorageBufferOffsetAlignment, 16, gpu->limits().storage_offset_alignment});
  const VkDeviceSize v_off = (bytes + align - 1) / align * align;
  EngineBuffer kv = e.buffer(v_off + bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, true);
  std::memset(kv.mapped, 0x7f, v_off + bytes);
  Tensor ck = wrap(*gpu, kv.buffer, 0, bytes, shape, DType::f32), cv = wrap(*gpu, kv.buffer, v_off, bytes, shape, DType::f32);
  KvCache cache = wrap_kv_cache(*gpu, config, ck, cv), ref_cache = cpu->kv_cache(config);
  EXPECT_EQ(cache.next_position(0), 0);
  std::vector<float> k_rows(kTokens * kKvHeads * kHeadDim);

  const std::vector<std::int32_t> positions = {0, 1, 2};
  const auto q = normal(kTokens * kHeads * kHeadDim, 11), k = normal(k_rows.size(), 12), v = normal(k_rows.size(), 13);
  const Chunk got = engine_chunk(e, *gpu, cache, q, k, v, positions);
  EXPECT_TRUE(all_close(got.out, reference(*cpu, ref_cache, q, k, v, positions), {kTokens, kHeads, kHeadDim}, 1e-5, 1e-4));
  // The engine reads the appended keys (rotated) in slots 0..2 and zeros after them.
  std::vector<float> stored(kCapacity * kKvHeads * kHeadDim);
  std::memcpy(stored.data(), kv.mapped, bytes);
  const std::vector<float>& roped = got.roped_k;
  EXPECT_TRUE(
      all_close(std::vector<float>(stored.begin(), stored.begin() + roped.size()), roped, {kTokens, kKvHeads, kHeadDim}, 0, 0));
  for (std::size_t i = roped.size(); i < stored.size(); ++i) ASSERT_EQ(stored[i], 0.0f) << i;

  // A cache of another shape or dtype, or K given as V, is refused by name.
  expect_invalid(
      [&] { wrap_kv_cache(*gpu, {.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = 4, .dtype = DType::f32}, ck, cv); },
      {"wrap_kv_cache", "k", "[1, 4, 2, 16]"});
  expect_invalid([&] { wrap_kv_cache(*gpu, {.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity}, ck, cv); },
                 {"wrap_kv_cache", "k", "f16"});
  expect_invalid([&] { wrap_kv_cache(*gpu, config, ck, ck); }, {"wrap_kv_cache", "v", "the tensor given as k"});
  expect_invalid([&] { wrap_kv_cache(*cpu, config, ck, cv); }, {"wrap_kv_cache", "CPU backend"});
  expect_invalid([&] { wrap_kv_cache(*gpu, config, Tensor{}, cv); }, {"wrap_kv_cache: k = an empty Tensor", "made by wrap"});
  expect_invalid([&] { wrap_kv_cache(*gpu, config, ck, Tensor{}); },
                 {"wrap_kv_cache: v = an empty Tensor", "an empty v only for a latent cache"});
  // A latent cache wraps K alone: a V is refused, and none is what it takes.
  KvCacheConfig latent = config;
  latent.latent = true;
  latent.v_head_dim = kHeadDim / 2;
  expect_invalid([&] { wrap_kv_cache(*gpu, latent, ck, cv); }, {"wrap_kv_cache", "v", "a latent cache stores V inside K"});
  EXPECT_EQ(wrap_kv_cache(*gpu, latent, ck, Tensor{}).bytes(), bytes);
}

// A paged cache's pool in the engine's buffer: [n_blocks, block_size, ...], rows reached
// through the block table, the engine reading the keys in the block the table names.
TEST_F(Interop, PagedKvCacheInTheEnginesBuffers) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  auto cpu = make_backend(BackendKind::cpu);
  constexpr std::size_t kBlock = 2, kBlocks = 3;  // 3 tokens take 2 blocks, one free
  KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity, .dtype = DType::f32};
  const KvCacheConfig ring = config;
  config.paged = true;
  config.block_size = kBlock;
  config.n_blocks = kBlocks;
  const std::size_t row = kKvHeads * kHeadDim;
  const VkDeviceSize bytes = kBlocks * kBlock * row * 4;
  EngineBuffer kb = e.buffer(bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, true);
  EngineBuffer vb = e.buffer(bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, false);
  std::memset(kb.mapped, 0x7f, bytes);
  const Shape pool = {kBlocks, kBlock, kKvHeads, kHeadDim};
  Tensor ck = wrap(*gpu, kb.buffer, 0, bytes, pool, DType::f32), cv = wrap(*gpu, vb.buffer, 0, bytes, pool, DType::f32);
  // The ring's shape is not the pool's: refused, naming the pool's.
  Tensor rk = wrap(*gpu, kb.buffer, 0, bytes, {1, kBlocks * kBlock, kKvHeads, kHeadDim}, DType::f32);
  expect_invalid([&] { wrap_kv_cache(*gpu, config, rk, cv); }, {"wrap_kv_cache", "k", "[3, 2, 2, 16]", "n_blocks, block_size"});
  KvCache cache = wrap_kv_cache(*gpu, config, ck, cv), ref_cache = cpu->kv_cache(ring);
  EXPECT_EQ(cache.free_blocks(), kBlocks);

  const std::vector<std::int32_t> positions = {0, 1, 2};
  const auto q = normal(kTokens * kHeads * kHeadDim, 21), k = normal(kTokens * row, 22), v = normal(kTokens * row, 23);
  const Chunk got = engine_chunk(e, *gpu, cache, q, k, v, positions);
  EXPECT_EQ(cache.free_blocks(), kBlocks - 2);
  EXPECT_TRUE(all_close(got.out, reference(*cpu, ref_cache, q, k, v, positions), {kTokens, kHeads, kHeadDim}, 1e-5, 1e-4));
  // Token t sits in block table[t / 2], row t % 2, of the engine's buffer.
  const std::vector<std::int32_t> table = cache.block_table(0);
  const std::vector<float>& roped = got.roped_k;
  const auto* stored = static_cast<const float*>(kb.mapped);
  for (std::size_t t = 0; t < kTokens; ++t) {
    ASSERT_GE(table[t / kBlock], 0) << t;
    const std::size_t at = (static_cast<std::size_t>(table[t / kBlock]) * kBlock + t % kBlock) * row;
    EXPECT_TRUE(all_close(std::vector<float>(stored + at, stored + at + row),
                          std::vector<float>(roped.begin() + t * row, roped.begin() + (t + 1) * row), {1, kKvHeads, kHeadDim}, 0,
                          0))
        << "token " << t;
  }
}

// A decode step recorded once into the engine's command buffer, replayed with set_tokens
// and resubmitted by the engine for every token (the ring wraps twice), against the CPU
// backend recording each step afresh; the replays count as run (the cache saves, and
// outlives the list as it ran); stats count the one recording and its barriers.
TEST_F(Interop, ReplayedStepReusesTheEnginesCommandBuffer) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  auto cpu = make_backend(BackendKind::cpu);
  // |extend|: an op recorded into the list after its command buffer was, which gives the
  // list a new encoding; the command buffer's, retired, must follow the replays too (it
  // once kept the first token's parameters: every later token wrong).
  for (const bool extend : {false, true}) {
    const KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity, .n_sinks = 1};
    KvCache cache = gpu->kv_cache(config), ref_cache = cpu->kv_cache(config);
    Tensor q = gpu->tensor({1, kHeads, kHeadDim}, DType::f32), k = gpu->tensor({1, kKvHeads, kHeadDim}, DType::f32);
    Tensor v = gpu->tensor({1, kKvHeads, kHeadDim}, DType::f32), out = gpu->tensor({1, kHeads, kHeadDim}, DType::f32);
    Tensor spare = gpu->tensor({1, kHeads, kHeadDim}, DType::f32);
    CommandList step = gpu->commands();
    VkCommandBuffer cb = VK_NULL_HANDLE;
    for (std::int32_t t = 0; t < 2 * static_cast<std::int32_t>(kCapacity) + 3; ++t) {
      const auto q1 = normal(kHeads * kHeadDim, 20 + t), k1 = normal(kKvHeads * kHeadDim, 40 + t),
                 v1 = normal(kKvHeads * kHeadDim, 60 + t);
      gpu->upload(q, q1);
      gpu->upload(k, k1);
      gpu->upload(v, v1);
      const std::vector<std::int32_t> pos = {t};
      if (t == 0) {
        step.rope(q, k, pos);
        step.kv_append(cache, k, v, pos);
        step.attention(q, cache, out, {.q_positions = pos});
        cb = e.begin();
        step.record(cb, {.dst_stage_mask = VK_PIPELINE_STAGE_HOST_BIT, .dst_access_mask = VK_ACCESS_HOST_READ_BIT});
        e.submit_and_wait(cb);
        if (extend) step.copy(out, spare);
      } else {
        step.set_tokens(pos);
        e.resubmit_and_wait(cb);
      }
      ASSERT_TRUE(all_close(gpu->download(out), reference(*cpu, ref_cache, q1, k1, v1, pos), {1, kHeads, kHeadDim}, 1e-5, 1e-4))
          << "token " << t << (extend ? ", an op recorded after the command buffer" : "");
    }
    EXPECT_EQ(cache.slot_positions(0), ref_cache.slot_positions(0));
    const CommandStats stats = step.stats();
    EXPECT_EQ(stats.encodings, 1u);  // one record, every replay patched in place
    if (!extend) {
      EXPECT_GT(stats.barriers, 0u);
    }
    // Each replay counted as run (the engine resubmits as it goes): the cache saves, and
    // destroying the list puts nothing back.
    EXPECT_FALSE(gpu->save_cache(cache).empty());
    const std::int32_t next = cache.next_position(0);
    { const CommandList gone = std::move(step); }
    EXPECT_EQ(cache.next_position(0), next);
    EXPECT_EQ(cache.slot_positions(0), ref_cache.slot_positions(0));
    CommandList after = gpu->commands();
    after.kv_append(cache, k, v, std::vector<std::int32_t>{next});
    after.submit_and_wait();
  }
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

// DeviceOptions::cap_limits' device_local_bytes holds on the caller's device too: 4 MiB
// tensors of vkattn's own until the 64 MiB cap refuses one, naming it.
TEST_F(Interop, MemoryIsCountedAgainstTheCap) {
  DeviceOptions options = interop_options();
  options.cap_limits = uncapped();
  options.cap_limits->device_local_bytes = std::uint64_t{64} << 20;
  auto gpu = make_backend(external(engine()), options);
  EXPECT_EQ(gpu->limits().device_local_bytes, std::uint64_t{64} << 20);
  std::vector<Tensor> held;
  try {
    for (;;) {
      held.push_back(gpu->tensor({std::size_t{1} << 20}, DType::f32));
      ASSERT_LE(held.size(), 16u) << "more tensors than the capped heap holds";
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
    EXPECT_NE(std::string(e.what()).find("in use of 67108864"), std::string::npos) << e.what();
  }
  EXPECT_GE(held.size(), 15u);  // what the capped heap holds, less what vkattn keeps for itself
}

TEST_F(Interop, RequirementsAreListedAndChecked) {
  const VulkanRequirements r = vulkan_requirements();
  EXPECT_EQ(r.api_version, VK_API_VERSION_1_1);
  EXPECT_TRUE(r.required_extensions.empty());
  ASSERT_EQ(r.optional_extensions.size(), 3u);
  EXPECT_STREQ(r.optional_extensions[0], "VK_EXT_subgroup_size_control");
  // The matrix units' extension with the features their kernels need.
  EXPECT_STREQ(r.optional_extensions[2], "VK_KHR_cooperative_matrix");
  ASSERT_EQ(r.optional_features.size(), 6u);
  EXPECT_STREQ(r.optional_features[2], "cooperativeMatrix");

  Engine& e = engine();
  // An instance made for Vulkan 1.0 (as the engine says it was) is refused by name.
  ExternalVulkan old = external(e);
  old.api_version = VK_API_VERSION_1_0;
  try {
    make_backend(old, interop_options());
    ADD_FAILURE() << "a Vulkan 1.0 instance was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(err.what()).find("ExternalVulkan::api_version = 1.0:"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("Vulkan 1.1"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("apiVersion"), std::string::npos) << err.what();
  }
  // Null handles and a queue family the device lacks or did not create.
  ExternalVulkan v = external(e);
  v.device = VK_NULL_HANDLE;
  expect_invalid([&] { make_backend(v, interop_options()); }, {"ExternalVulkan::device", "VK_NULL_HANDLE"});
  v = external(e);
  v.queue = VK_NULL_HANDLE;
  expect_invalid([&] { make_backend(v, interop_options()); }, {"ExternalVulkan::queue"});
  v = external(e);
  v.queue_family_index = 1000;
  expect_invalid([&] { make_backend(v, interop_options()); }, {"ExternalVulkan::queue_family_index", "1000"});
  v.device_create_info = nullptr;
  expect_invalid([&] { make_backend(v, interop_options()); }, {"ExternalVulkan::queue_family_index", "1000", "[0, "});
  // A family the device has but its create info made no queue of.
  VkDeviceCreateInfo no_queues = *e.device_create_info();
  no_queues.queueCreateInfoCount = 0;
  v = external(e);
  v.device_create_info = &no_queues;
  expect_invalid(
      [&] { make_backend(v, interop_options()); },
      {"ExternalVulkan::queue_family_index = 0", "a queue family of ExternalVulkan::device_create_info->pQueueCreateInfos"});

  // Optional features are used only when the device's create info enables them.
  v = external(e);
  v.device_create_info = nullptr;
  auto plain = make_backend(v, interop_options());
  EXPECT_FALSE(plain->limits().subgroup_size_control);
  // spec_minimum (VKATTN_CAP_LIMITS) turns size control off.
  if (list_devices()[0].limits.subgroup_size_control && !env_set("VKATTN_CAP_LIMITS")) {
    auto full = make_backend(external(e), interop_options());
    EXPECT_TRUE(full->limits().subgroup_size_control);
    // A Vulkan 1.3 engine enables the features through Vulkan13Features and seldom names the
    // promoted extension: size control all the same (vkattn reads the create info alone).
    VkDeviceCreateInfo core13 = *e.device_create_info();
    std::vector<const char*> names;
    for (std::uint32_t i = 0; i < core13.enabledExtensionCount; ++i) {
      const char* name = core13.ppEnabledExtensionNames[i];
      if (std::string_view(name) != "VK_EXT_subgroup_size_control") names.push_back(name);
    }
    core13.enabledExtensionCount = static_cast<std::uint32_t>(names.size());
    core13.ppEnabledExtensionNames = names.data();
    VkPhysicalDeviceVulkan13Features features13{};
    features13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
    features13.subgroupSizeControl = features13.computeFullSubgroups = VK_TRUE;
    core13.pNext = &features13;
    v = external(e);
    v.device_create_info = &core13;
    EXPECT_TRUE(make_backend(v, interop_options())->limits().subgroup_size_control);
    features13.computeFullSubgroups = VK_FALSE;  // both features, as with the extension
    EXPECT_FALSE(make_backend(v, interop_options())->limits().subgroup_size_control);
  }
}

TEST_F(Interop, MisuseIsRefusedAndRecordsNothing) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  EngineBuffer buf = e.buffer(4096, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, false);
  const VkDeviceSize align = std::max<VkDeviceSize>(e.limits().minStorageBufferOffsetAlignment, 16);

  expect_invalid(
      [&] {
        wrap(*gpu, buf.buffer, align / 2, 256, {4, 16}, DType::f32);
      },
      {"wrap", "offset", "minStorageBufferOffsetAlignment"});
  expect_invalid([&] { wrap(*gpu, buf.buffer, 0, 255, {4, 16}, DType::f32); }, {"wrap", "size_bytes", "255", ">= 256"});
  // f16 [3, 3]: 9 halves in 20 bytes, which the kernels move as 32.
  expect_invalid([&] { wrap(*gpu, buf.buffer, 0, 20, {3, 3}, DType::f16); }, {"size_bytes", "20", ">= 32"});
  // Past the tensor's bytes, but not whole words (wrap_kv_cache's fill would be invalid).
  expect_invalid([&] { wrap(*gpu, buf.buffer, 0, 258, {4, 16}, DType::f32); }, {"size_bytes", "258", "a multiple of 4"});
  expect_invalid(
      [&] {
        wrap(*gpu, buf.buffer, 0, VkDeviceSize{1} << 40, {4, 16}, DType::f32);
      },
      {"size_bytes", "maxStorageBufferRange"});
  expect_invalid([&] { wrap(*gpu, VK_NULL_HANDLE, 0, 256, {4, 16}, DType::f32); }, {"buffer", "VK_NULL_HANDLE"});
  // Ranges past the buffer's end (4096 bytes), or wrapping around: refused before a shader
  // reads there.
  for (const auto& [offset, size] :
       {std::pair<VkDeviceSize, VkDeviceSize>{4096, 256}, {0, 8192}, {3840, 512}, {~VkDeviceSize{0} - 255, 256}}) {
    const std::string value = std::to_string(offset) + " + " + std::to_string(size);
    expect_invalid(
        [&] {
          wrap(*gpu, buf.buffer, offset, size, {4, 16}, DType::f32);
        },
        {"wrap", "offset + size_bytes", value.c_str(), "4096 bytes"});
  }
  EXPECT_NO_THROW(wrap(*gpu, buf.buffer, 3840, 256, {4, 16}, DType::f32));  // the last 256 bytes
  expect_invalid([&] { wrap(*gpu, buf.buffer, 0, 256, {4, 0}, DType::f32); }, {"wrap", "shape[1]"});
  auto cpu = make_backend(BackendKind::cpu);
  expect_invalid([&] { wrap(*cpu, buf.buffer, 0, 256, {4, 16}, DType::f32); }, {"wrap", "backend", "CPU backend"});

  // A wrapped tensor in a list of another backend (a second one on the same device, the CPU
  // backend), or released: refused, nothing recorded.
  Tensor x = wrap(*gpu, buf.buffer, 0, 256, {4, 1, 16}, DType::f32);
  const std::vector<std::int32_t> pos = {0, 1, 2, 3};
  auto other = make_backend(external(e), interop_options());
  CommandList theirs = other->commands();
  expect_invalid([&] { theirs.rope(x, pos); }, {"rope", "x"});
  CommandList cpu_list = cpu->commands();
  expect_invalid([&] { cpu_list.rope(x, pos); }, {"rope", "x"});
  Tensor released = std::move(x);
  CommandList mine = gpu->commands();
  expect_invalid([&] { mine.rope(x, pos); }, {"rope", "x", "empty Tensor"});
  EXPECT_EQ(theirs.stats().ops, 0u);
  EXPECT_EQ(mine.stats().ops, 0u);

  // record(): not into a null command buffer, not from the CPU backend or a backend with
  // a device of its own, not with timestamps.
  mine.rope(released, pos);
  expect_invalid([&] { mine.record(nullptr); }, {"record", "command_buffer", "VK_NULL_HANDLE"});
  VkCommandBuffer cb = e.begin();
  expect_invalid([&] { cpu_list.record(cb); }, {"record", "CPU backend"});
  std::string why;
  auto own = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(own, why);
  CommandList own_list = own->commands();
  expect_invalid([&] { own_list.record(cb); }, {"record", "made its own device"});
  // Exit barriers Vulkan forbids: an access none of the stages performs, bits that are no
  // stage or access.
  const struct {
    std::uint32_t stages, access;
    const char* param;
    const char* why;
  } barriers[] = {
      {VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_SHADER_READ_BIT, "dst_access_mask", "SHADER_READ needs a shader stage"},
      {VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT, "dst_access_mask",
       "needs COLOR_ATTACHMENT_OUTPUT"},
      {VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_HOST_READ_BIT, "dst_access_mask",
       "TRANSFER_READ needs TRANSFER"},
      {VK_PIPELINE_STAGE_ALL_GRAPHICS_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, "dst_access_mask", "0x1000 (with VK_ACCESS_TRANSFER"},
      {0x80000000u, 0, "dst_stage_mask", "0x80000000"},
      {0, 0x40000000u, "dst_access_mask", "0x40000000"},
  };
  for (const auto& b : barriers) {
    expect_invalid([&] { mine.record(cb, {.dst_stage_mask = b.stages, .dst_access_mask = b.access}); },
                   {"record", b.param, b.why});
  }
  // ALL_GRAPHICS stands for the graphics stages, the fragment shader and the color
  // attachment output among them.
  VkCommandBuffer graphics = e.begin();
  mine.record(graphics, {.dst_stage_mask = VK_PIPELINE_STAGE_ALL_GRAPHICS_BIT,
                         .dst_access_mask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT});
  e.submit_and_wait(graphics);
  // A command buffer of another device (the loader gives it that device's dispatch table).
  Engine second;
  VkCommandBuffer theirs_cb = second.begin();
  expect_invalid([&] { mine.record(theirs_cb); }, {"record", "command_buffer", "another device"});
  second.submit_and_wait(theirs_cb);
  if (gpu->limits().timestamps) {
    CommandList timed = gpu->commands({.timestamps = true});
    timed.rope(released, pos);
    expect_invalid([&] { timed.record(cb); }, {"record", "timestamps"});
  }
  // The command buffer got nothing from the refusals: it runs empty.
  e.submit_and_wait(cb);
  expect_no_validation_messages(*own);
}

TEST_F(Interop, BorrowedObjectsOutliveTheBackend) {
  Engine& e = engine();
  EngineBuffer buf = e.buffer(
      256, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, true);
  VkPipelineCache cache = VK_NULL_HANDLE;
  auto info = vk_struct<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  ASSERT_EQ(vkCreatePipelineCache(e.device(), &info, nullptr, &cache), VK_SUCCESS);
  std::vector<float> values(64);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  {
    ExternalVulkan v = external(e);
    v.pipeline_cache = cache;
    auto gpu = make_backend(v, interop_options());
    Tensor x = wrap(*gpu, buf.buffer, 0, 256, {64}, DType::f32);
    Tensor y = gpu->tensor({64}, DType::f32);
    gpu->upload(x, values);
    CommandList cmd = gpu->commands();
    cmd.copy(x, y);
    cmd.submit_and_wait();  // the self-contained path on the engine's queue
    EXPECT_EQ(gpu->download(y), values);
  }
  // Buffer, pipeline cache, queue and device still work, and the engine destroys them (the
  // validation layer would report a double destruction, or objects vkattn left behind on
  // the device). (What the cache holds is the driver's business: lavapipe keeps nothing.)
  std::size_t size = 0;
  ASSERT_EQ(vkGetPipelineCacheData(e.device(), cache, &size, nullptr), VK_SUCCESS);
  EXPECT_GE(size, 32u);  // at least the header
  std::vector<float> back(64);
  std::memcpy(back.data(), buf.mapped, 256);
  EXPECT_EQ(back, values);
  VkCommandBuffer cb = e.begin();
  vkCmdFillBuffer(cb, buf.buffer, 0, 256, 0);
  e.submit_and_wait(cb);
  vkDestroyPipelineCache(e.device(), cache, nullptr);
}

}  // namespace
}  // namespace vkattn::test
