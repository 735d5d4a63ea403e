// The GPU decode kernels (attn_decode.comp, and attn_decode_group.comp for big query
// groups; KernelShape::gpu with few rows) against the CPU reference: each variant
// ($VKATTN_DECODE: shuffles or shared memory, the splits merged by the last workgroup or by
// a second pass, contiguous splits and more keys per stage, the group kernel as planned and
// with other lanes and keys) forced on every attention case, also at the Vulkan minimums;
// quantized K and V whose rows hold an odd number of blocks; the caches' occupancy bound
// through appends, replay, wrap, reset, truncate, copy and restore, under every kernel
// family; and the group kernel split for lavapipe's loop limit. test_replay.cpp replays a
// wrapping ring under each variant.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/attention_io.hpp"

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

struct Variant {
  const char* name;
  const char* env;  // $VKATTN_DECODE
};
const Variant kVariants[] = {
    {"shuffles_last", "reduce=subgroup,merge=last"},
    {"shuffles_two_pass", "reduce=subgroup,merge=two_pass"},
    {"shared_last", "reduce=shared,merge=last"},
    {"shared_two_pass", "reduce=shared,merge=two_pass"},
    {"contiguous_4_keys", "interleave=0,keys=4"},
    // The ring of 2 stages of 4 keys per key group a GPU takes by default at head dims to
    // 128 (a CPU device takes the loop before the ring, depth 1, and 2 keys), with splits
    // as the target count gives them; a ring of 3 stages of 2 keys over runs of 2 stages
    // per split.
    {"depth_2_4_keys", "depth=2,keys=4,divide=0"},
    {"depth_3_runs_of_2", "depth=3,run=2"},
    // attn_decode_group where it can run (not with on-read RoPE): as planned, and with 4
    // lanes per row (32 rows per tile) over stages of 2 keys.
    {"group", "kernel=group"},
    {"group_4_lanes_2_keys", "kernel=group,lanes=4,keys=2"},
    // A row's maximum moved lazily (the shuffle variant's candidate for a GPU run).
    {"shuffles_lazy_max", "reduce=subgroup,max=lazy"},
};

// The GPU shape planned for a device of very many compute units: every case has few rows
// for it, so every case takes the decode kernel, split as far as its keys allow.
DeviceOptions decode_options() {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 1u << 20;
  return options;
}

std::shared_ptr<Backend> decode_backend(const char* env, const DeviceOptions& options = decode_options()) {
  ScopedEnv decode("VKATTN_DECODE", env);
  return shared_backend(BackendKind::vulkan, options);
}

class DecodeVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<std::tuple<AttnCase, Variant>> {};

TEST_P(DecodeVulkanVsCpu, Matches) {
  const auto& [c, v] = GetParam();
  VKATTN_SKIP_UNLESS_PAIR_RUNS(c, v, kVariants);
  auto gpu = decode_backend(v.env);
  expect_fused_matches(*gpu, *cpu_, c);
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

std::string decode_name(const ::testing::TestParamInfo<std::tuple<AttnCase, Variant>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeVulkanVsCpu,
                         ::testing::Combine(::testing::ValuesIn(attention_cases()), ::testing::ValuesIn(kVariants)), decode_name);

// The group variants above fall back to the decode kernel where the group kernel cannot
// run (on-read RoPE, a row's lanes past the subgroup's): on cases it can run, it is the one
// that ran.
TEST_F(VulkanVsCpuTest, GroupVariantsRunTheGroupKernel) {
  if (limits_capped_by_environment()) GTEST_SKIP() << "VKATTN_CAP_LIMITS replaces the limits these choices are made for";
  for (const auto& [v, lanes] : {std::pair{kVariants[7], 8u}, std::pair{kVariants[8], 4u}}) {
    auto gpu = decode_backend(v.env);
    const AttentionKernel want = kernel_lanes(*gpu) >= lanes ? AttentionKernel::group : AttentionKernel::decode;
    for (const AttnCase& c : cases_named({"gqa_8", "decode_3_sequences", "sinks", "softcap"})) {
      const CommandStats stats = expect_fused_matches(*gpu, *cpu_, c);
      ASSERT_EQ(stats.attention.size(), 1u) << c.name;
      EXPECT_EQ(stats.attention[0].kernel, want) << c.name << ", " << v.name;
    }
  }
}

// The Vulkan 1.1 minimums (no subgroup operations: the shared-memory variant; 16 KiB of
// shared memory; 128 invocations), with 8 storage buffers as the other spec-minimum tests.
class DecodeAtSpecMinimum : public DecodeVulkanVsCpu {};

const Variant kMinimumVariants[] = {kVariants[2], kVariants[3], kVariants[4], kVariants[6]};  // no shuffles there

TEST_P(DecodeAtSpecMinimum, Matches) {
  const auto& [c, v] = GetParam();
  VKATTN_SKIP_UNLESS_PAIR_RUNS(c, v, kMinimumVariants);
  DeviceOptions options = decode_options();
  options.cap_limits = test_spec_minimum();
  options.cap_limits->compute_units = 1u << 20;
  auto gpu = decode_backend(v.env, options);
  expect_fused_matches(*gpu, *cpu_, c);
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAtSpecMinimum,
                         ::testing::Combine(::testing::ValuesIn(attention_cases()), ::testing::ValuesIn(kMinimumVariants)),
                         decode_name);

// Quantized K and V, one and three decode tokens: rows of one and three blocks of 32 (odd:
// a row's scale is the second half of its word as often as the first).
class DecodeQuantized : public VulkanVsCpuTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(DecodeQuantized, OddBlocksPerRow) {
  auto gpu = decode_backend(GetParam().env);
  for (DType dtype : {DType::q8_0, DType::q4_0}) {
    for (std::size_t d : {32u, 96u}) {
      for (std::size_t tokens : {1u, 3u}) {
        AttnInputs in = random_inputs(tokens, 8, 2, 100, d, 1, 77 + static_cast<std::uint32_t>(d));
        in.kv_dtype = dtype;
        in.config.path = AttentionPath::fused;
        EXPECT_TRUE(all_close(run_attention_op(*gpu, in), run_attention(*cpu_, in).out, in.out_shape(), 1e-4, 1e-4))
            << to_string(dtype) << ", head_dim " << d << ", " << tokens << " tokens";
      }
    }
  }
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

INSTANTIATE_TEST_SUITE_P(Variants, DecodeQuantized, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

// One decode token of sequence |seq| at |pos| over |cache|: the output on each backend.
struct CacheDecode {
  static constexpr std::size_t kHeads = 8, kKvHeads = 2, kDim = 64;
  Backend& b;
  KvCache cache;
  explicit CacheDecode(Backend& backend, const KvCacheConfig& config) : b(backend), cache(b.kv_cache(config)) {}
  void append(std::int32_t from, std::int32_t n, std::int32_t seq, std::uint32_t seed) {
    const auto un = static_cast<std::size_t>(n);
    Tensor k = b.tensor({un, kKvHeads, kDim}, DType::f32), v = b.tensor({un, kKvHeads, kDim}, DType::f32);
    b.upload(k, normal(un * kKvHeads * kDim, seed));
    b.upload(v, normal(un * kKvHeads * kDim, seed + 1));
    std::vector<std::int32_t> pos(un), seqs(un, seq);
    for (std::size_t i = 0; i < un; ++i) pos[i] = from + static_cast<std::int32_t>(i);
    CommandList cmd = b.commands();
    cmd.kv_append(cache, k, v, pos, seqs);
    cmd.submit_and_wait();
  }
  std::vector<float> attend(std::int32_t pos, std::int32_t seq, AttentionPath path) {
    Tensor q = b.tensor({1, kHeads, kDim}, DType::f32), out = b.tensor({1, kHeads, kDim}, DType::f32);
    b.upload(q, normal(kHeads * kDim, 991));
    CommandList cmd = b.commands();
    cmd.attention(q, cache, out, {.q_positions = {&pos, 1}, .q_seq_ids = {&seq, 1}}, {.path = path});
    cmd.submit_and_wait();
    return b.download(out);
  }
};

// Every kernel family stops at the occupancy bound, which each way of changing a cache
// keeps: appends in several calls, truncate, a ring that wraps, reset then fewer tokens,
// kv_copy_sequence, restore_cache into a fresh cache. A bound left behind (not raised by
// kv_append, not written by the host, not copied) hides keys and fails here.
TEST_F(VulkanVsCpuTest, DecodeStopsAtTheOccupancyBound) {
  const KvCacheConfig config{
      .n_seqs = 2, .n_kv_heads = CacheDecode::kKvHeads, .head_dim = CacheDecode::kDim, .capacity = 48, .n_sinks = 2};
  for (const KernelFamily& f : kKernelFamilies) {
    auto gpu = family_backend(f);
    CacheDecode g(*gpu, config), c(*cpu_, config);
    auto check = [&](std::int32_t pos, std::int32_t seq, const std::string& what) {
      EXPECT_TRUE(all_close(g.attend(pos, seq, f.path), c.attend(pos, seq, f.path), {1, 8, 64}, 1e-4, 1e-4))
          << f.name << ": " << what;
    };
    for (CacheDecode* x : {&g, &c}) {
      x->append(0, 5, 0, 1);
      x->append(5, 12, 0, 2);
    }
    check(16, 0, "after two appends");
    for (CacheDecode* x : {&g, &c}) {
      x->cache.truncate(0, 10);
      x->append(10, 1, 0, 3);
    }
    check(10, 0, "after truncate");
    for (CacheDecode* x : {&g, &c}) {
      x->append(11, 30, 0, 4);
      x->append(41, 36, 0, 5);  // the ring of 46 wraps
    }
    check(76, 0, "after the ring wrapped");
    for (CacheDecode* x : {&g, &c}) {
      CommandList cmd = x->b.commands();
      cmd.kv_copy_sequence(x->cache, 0, 1);
      cmd.submit_and_wait();
    }
    check(76, 1, "on a copied sequence");
    for (CacheDecode* x : {&g, &c}) {
      x->cache.reset(0);
      x->append(0, 9, 0, 6);
    }
    check(8, 0, "after reset and fewer tokens");
    for (CacheDecode* x : {&g, &c}) {
      x->cache.truncate(0, 4);
      x->append(4, 2, 0, 7);
    }
    check(5, 0, "after truncate to fewer tokens");
    const std::vector<std::uint8_t> saved = gpu->save_cache(g.cache);
    CacheDecode restored(*gpu, config);
    gpu->restore_cache(restored.cache, saved);
    EXPECT_TRUE(all_close(restored.attend(76, 1, f.path), c.attend(76, 1, f.path), {1, 8, 64}, 1e-4, 1e-4))
        << f.name << ": a restored cache";
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

// A cache far larger than what it holds: the three stages launch a grid sized for the
// device (attention_op.cpp: device_sized), each workgroup striding over key tiles and runs
// of keys up to the bound, so a grid index taken for the capacity, or a stride that skips
// a run, shows here: with one compute unit, 2 workgroups per KV head, first with one
// round of the stride in use, then past 8,192 keys with many; with 8 (the guess for a CPU
// device), 16 per head.
TEST_F(VulkanVsCpuTest, DecodeOverACacheFarLargerThanItHolds) {
  const KvCacheConfig config{.n_kv_heads = CacheDecode::kKvHeads, .head_dim = CacheDecode::kDim, .capacity = 16384};
  for (std::uint32_t units : {1u, 8u}) {
    DeviceOptions options = shape_options(KernelShape::cpu);
    options.cap_limits = uncapped();
    options.cap_limits->compute_units = units;
    auto gpu = shared_backend(BackendKind::vulkan, options);
    CacheDecode g(*gpu, config), c(*cpu_, config);
    for (CacheDecode* x : {&g, &c}) x->append(0, 1000, 0, 1);
    const AttentionPath path = AttentionPath::three_stages;
    EXPECT_TRUE(all_close(g.attend(999, 0, path), c.attend(999, 0, path), {1, 8, 64}, 1e-4, 1e-4))
        << units << " compute units: 1,000 tokens in 16,384 slots";
    for (CacheDecode* x : {&g, &c}) x->append(1000, 8500, 0, 2);
    EXPECT_TRUE(all_close(g.attend(9499, 0, path), c.attend(9499, 0, path), {1, 8, 64}, 1e-4, 1e-4))
        << units << " compute units: 9,500 tokens in 16,384 slots";
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

// Mesa's llvmpipe ends every loop of a shader once a vector of invocations has passed
// 65,535 loop iterations in all. attn_decode_group as planned for one token of 24 heads of
// 288 over one KV head on one compute unit: one split of 1,536 stages of 8 keys at 57
// iterations each (88,000), which the host splits on CPU devices; unsplit, rows came out
// as zeros or partial sums. On other devices one split runs and matches as well.
TEST_F(VulkanVsCpuTest, GroupKernelSplitsForTheCpuLoopLimit) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 1;
  BuiltPipelines built;
  built.attach(options);
  auto gpu = make_backend(BackendKind::vulkan, options);
  if (!gpu->limits().subgroup_shuffle || !gpu->limits().subgroup_size_control) GTEST_SKIP() << "no group kernel here";
  VKATTN_REQUIRE_EIGHT_LANES(*gpu, "the group kernel");
  AttnInputs in = random_inputs(1, 24, 1, 12288, 288, 1, 5);
  in.config.path = AttentionPath::fused;
  EXPECT_TRUE(all_close(run_attention_op(*gpu, in), run_attention(*cpu_, in).out, in.out_shape(), 1e-4, 1e-4));
  EXPECT_TRUE(built.any("attn_decode_group"));
  EXPECT_TRUE(gpu->validation_messages().empty());
}

// Short contexts in one wave: decode of 32 query heads over 8 KV heads (d 128, f16) over
// 1,000 keys on a 132-unit device is one dispatch (the splits merged by the last
// workgroup of each tile; two stages a split, which a GPU's ring of two loads at once),
// and matches the CPU; so is a 256-slot cache's.
TEST_F(VulkanVsCpuTest, DecodeShortContextIsOneDispatch) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 132;
  on_vulkan(options, [&](Backend& gpu) {
    for (std::size_t keys : {1000u, 256u}) {
      AttnInputs in = random_inputs(1, 32, 8, keys, 128, 1, 31);
      in.kv_dtype = DType::f16;
      in.config.path = AttentionPath::fused;
      CommandStats stats;
      EXPECT_TRUE(all_close(run_attention_op(gpu, in, &stats), run_attention(*cpu_, in).out, in.out_shape(), 2e-4, 1e-4))
          << keys << " keys";
      EXPECT_EQ(stats.ops, 1u) << keys << " keys: no merge pass";
    }
  });
}

// The GPU probe's parts of attn_decode left out ($VKATTN_DECODE=skip=..., gpu.md; no valid
// result; the splits merged by the last workgroup, where a second pass would write from
// what was skipped), each leaving what it should: without the end nothing is written (the output
// keeps what it held); without the splits' merge neither, where the keys are split and the
// last workgroup merges; without the exchanges between a key group's lanes each lane's
// partial sums stand for the scores, so the result is written and wrong; "none" matches.
TEST_F(VulkanVsCpuTest, DecodeProbeSkipsWhatItNames) {
  AttnInputs in = random_inputs(1, 8, 2, 3000, 64, 1, 41);
  in.config.path = AttentionPath::fused;
  const std::vector<float> want = run_attention(*cpu_, in).out;
  enum class Expect { match, wrong, untouched };
  const struct {
    const char* env;
    Expect expect;
  } rows[] = {{"skip=none,merge=last", Expect::match},
              {"skip=end,merge=last", Expect::untouched},
              {"skip=merge,merge=last", Expect::untouched},
              {"skip=exchange+merge,merge=last", Expect::untouched},
              {"skip=exchange", Expect::wrong}};
  for (const auto& row : rows) {
    SCOPED_TRACE(row.env);
    auto gpu = decode_backend(row.env);
    const AttnInputTensors t = upload_inputs(*gpu, in);
    Tensor out = gpu->tensor(in.out_shape(), DType::f32);
    const std::vector<float> held(want.size(), 7.0f);
    gpu->upload(out, held);
    CommandList cmd = gpu->commands();
    cmd.attention(t.q, t.k, t.v, out, {in.q_pos, in.k_pos}, in.config);
    cmd.submit_and_wait();
    const std::vector<float> got = gpu->download(out);
    switch (row.expect) {
      case Expect::match: EXPECT_TRUE(all_close(got, want, in.out_shape(), 1e-4, 1e-4)); break;
      case Expect::wrong:
        EXPECT_NE(got, held) << "written";
        EXPECT_FALSE(all_close(got, want, in.out_shape(), 1e-2, 1e-2)) << "from each lane's partial sums";
        break;
      case Expect::untouched: EXPECT_EQ(got, held) << "nothing written"; break;
    }
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

// $VKATTN_DECODE is read when a backend is made; a malformed one is refused by name.
TEST(DecodeTuning, MalformedKnobsAreRefused) {
  expect_knobs_refused("VKATTN_DECODE", {"keys", "kernel=fast", "merge=later", "keys=x", "load_only=2", "unknown=1", "depth=4",
                                         "divide=2", "run=x", "packed=2", "skip=all", "skip=end+end", "skip=", "skip=merge+"});
}

}  // namespace
}  // namespace vkattn::test
