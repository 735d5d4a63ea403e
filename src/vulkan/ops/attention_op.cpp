// Host side of the three attention stages: tile sizes chosen to fit the device's shared
// memory and workgroup limits, per-token metadata packed into one parameter range.
#include <algorithm>
#include <bit>
#include <cstring>

#include "common/kv_cache_impl.hpp"
#include "common/quant.hpp"
#include "common/rope_math.hpp"
#include "common/shape_math.hpp"
#include "vulkan/check.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

// Key splits (weighted sum, fused attention): when rows alone give fewer workgroups than
// this (decode: one per KV head), the keys are split so that a large GPU has work for
// every compute unit; each split covers at least kMinKeysPerSplit keys so that the second
// pass stays cheap.
constexpr std::uint64_t kSplitTargetGroups = 256;
constexpr std::uint32_t kMinKeysPerSplit = 256;
// Workgroups per compute unit that the three stages launch over a cache when they skip
// the keys past its occupancy bound.
constexpr std::uint64_t kBoundGroupsPerUnit = 4;

// Workgroups per row tile for a kernel that strides over |units| key tiles or runs of keys
// and stops at a cache's occupancy bound: enough for the device over all |base_groups| row
// tiles, at most |units|. The grid is then sized for the device, not for the capacity, so
// a cache far larger than what it holds launches no empty workgroups (each costs a CPU
// device microseconds), and a list recorded early stays valid as the cache fills.
std::uint32_t device_sized(const Context& ctx, std::uint64_t base_groups, std::uint64_t units) {
  const std::uint64_t target = kBoundGroupsPerUnit * compute_units(ctx);
  const std::uint64_t per_tile = ceil_div(target, std::max<std::uint64_t>(base_groups, 1));
  return u32(std::clamp<std::uint64_t>(per_tile, 1, std::max<std::uint64_t>(units, 1)));
}
// Softmax: from this many rows on, subgroups take whole rows (enough of them to fill a GPU).
constexpr std::uint32_t kSoftmaxSubgroupRowsMin = 256;

// Whether the scores kernel of |wg| invocations may hand query values between lanes by
// index: the device has subgroup shuffles and votes (subgroupAny) and can be made to run
// whole subgroups of the size the kernel asks for (preferred_subgroup_size: 16 where
// allowed, so that Intel is not forced into SIMD32), which divides the workgroup.
bool uses_subgroup_shuffles(const DeviceLimits& limits, std::uint32_t wg) {
  const std::uint32_t sg = preferred_subgroup_size(limits);
  return limits.subgroup_shuffle && limits.subgroup_vote && limits.subgroup_size_control && sg >= 4 && std::has_single_bit(sg) &&
         wg % sg == 0;
}

}  // namespace

std::uint32_t workgroup_size(const Context& ctx, std::uint32_t cap) {
  return std::bit_floor(std::min(cap, ctx.limits.max_workgroup_invocations));
}

std::uint32_t preferred_subgroup_size(const DeviceLimits& limits) {
  if (!limits.subgroup_size_control) return limits.subgroup_size;
  return std::clamp(16u, limits.subgroup_min_size, limits.subgroup_max_size);
}

std::uint32_t compute_units(const Context& ctx) {
  if (ctx.limits.compute_units) return ctx.limits.compute_units;
  // Unknown: a mid-sized discrete GPU, a small integrated one. Too high a guess costs a
  // larger merge; too low leaves units idle.
  return ctx.physical.kind == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU ? 32 : 8;
}

Binding read_binding(std::shared_ptr<TensorImpl> t, bool texel) { return Binding{std::move(t), 0, 0, false, texel}; }

Binding write_binding(std::shared_ptr<TensorImpl> t) { return Binding{std::move(t), 0, 0, true, false}; }

KeySource plain_keys(std::shared_ptr<TensorImpl> t) {
  const auto n = u32(t->shape[0]), n_kv = u32(t->shape[1]), d = u32(t->shape[2]);
  const auto type = kv_type_code(t->dtype), scales = u32(scale_words_offset(t->numel, t->dtype));
  return {std::move(t), nullptr, n, n_kv, d, n_kv * d, d, 0, 0, type, scales};
}

KeySource cache_keys(const KvCacheImpl& cache, std::shared_ptr<TensorImpl> t, std::shared_ptr<TensorImpl> slots) {
  // t: [n_seqs, capacity, n_kv_heads, head_dim], or a paged cache's pool [n_blocks,
  // block_size, n_kv_heads, head_dim], whose rows have no sequence stride
  const auto& c = cache.config;
  const auto cap = u32(c.capacity), n_kv = u32(t->shape[2]), d = u32(t->shape[3]);
  const auto type = kv_type_code(t->dtype), scales = u32(scale_words_offset(t->numel, t->dtype));
  KeySource k{std::move(t),
              std::move(slots),
              cap,
              n_kv,
              d,
              n_kv * d,
              d,
              c.paged ? 0u : cap * n_kv * d,
              u32(cache.meta_stride()),
              type,
              scales,
              u32(cache.bound_offset()),
              u32(c.n_seqs)};
  if (c.paged) k.page = cache.block_shift + 1;  // its block table follows each sequence's capacity entries
  return k;
}

SpecConstants paged(SpecConstants spec, const KeySource& keys) {
  if (keys.page == 0) return spec;  // the pipelines plain keys and ring caches always had
  if (spec.size() <= VKATTN_SPEC_KV_PAGE) spec.resize(VKATTN_SPEC_KV_PAGE + 1);
  spec[VKATTN_SPEC_KV_PAGE] = keys.page;
  return spec;
}

Binding key_positions(ParamArena& params, const KeySource& keys, const ScoresParams& p) {
  if (keys.meta_stride != 0) return read_binding(keys.slots);
  std::uint8_t* bytes = nullptr;
  const Binding b = params.allocate(p.k_pos.size() + p.k_seq.size(), &bytes);
  std::memcpy(bytes, p.k_pos.data(), 4 * p.k_pos.size());
  std::memcpy(bytes + 4 * p.k_pos.size(), p.k_seq.data(), 4 * p.k_seq.size());
  return b;
}

std::uint32_t tile_rows(std::uint32_t cap, std::uint32_t n_tokens, std::uint32_t group, bool per_seq,
                        const std::vector<std::int32_t>& q_seq) {
  std::uint32_t rows = std::min(cap, n_tokens * group);
  const bool mixed = per_seq && std::any_of(q_seq.begin(), q_seq.end(), [&](std::int32_t s) { return s != q_seq[0]; });
  if (mixed) {
    rows = std::min(rows, group);
    while (group % rows != 0) --rows;
  }
  return rows;
}

namespace {

const std::vector<std::uint32_t>& meta_turns(const ScoresParams& p) {
  static const std::vector<std::uint32_t> none;
  return p.rope_on_read ? rope_turn_words(p.rope, 0).words : none;
}

// The meta words of |p| and |sinks| (the extra words aside).
std::size_t meta_words(const ScoresParams& p, const std::vector<float>& sinks) {
  return VKATTN_META_HEADER + p.q_pos.size() + p.q_seq.size() + p.ring.size() + p.alibi_slopes.size() + p.q_cpos.size() +
         sinks.size() + meta_turns(p).size() + (p.temperature ? p.q_pos.size() : 0);
}

// Every field is 32-bit (int32, float or uint32): written as words after the header of
// their offsets. The extra words are left as they are.
void write_meta(std::uint8_t* bytes, const ScoresParams& p, const std::vector<float>& sinks) {
  std::uint32_t at = VKATTN_META_HEADER;
  auto append = [&](std::uint32_t field, const auto& v) {
    static_assert(sizeof(v[0]) == 4);
    std::memcpy(bytes + 4 * field, &at, 4);
    if (!v.empty()) std::memcpy(bytes + 4 * std::size_t{at}, v.data(), v.size() * 4);
    at += u32(v.size());
  };
  append(VKATTN_META_Q_POS, p.q_pos);
  append(VKATTN_META_Q_SEQ, p.q_seq);
  append(VKATTN_META_RING, p.ring);
  append(VKATTN_META_SLOPES, p.alibi_slopes);
  append(VKATTN_META_Q_CPOS, p.q_cpos);
  append(VKATTN_META_SINKS, sinks);
  append(VKATTN_META_TURNS, meta_turns(p));
  const std::uint32_t temperature_at = p.temperature ? at : 0;  // none: offset 0
  std::memcpy(bytes + 4 * VKATTN_META_Q_TEMP, &temperature_at, 4);
  if (p.temperature) {
    for (std::int32_t pos : p.q_pos) {
      const auto t = static_cast<float>(query_temperature(p, pos));
      std::memcpy(bytes + 4 * std::size_t{at++}, &t, 4);
    }
  }
}

}  // namespace

AttnMeta attn_meta(ParamArena& params, const ScoresParams& p, const std::vector<float>& sinks, std::uint32_t extra) {
  const std::size_t words = meta_words(p, sinks);
  std::uint8_t* bytes = nullptr;
  AttnMeta m{params.allocate(words + extra, &bytes), p.rope_on_read ? u32(p.rope.rotary_dim) : 0u};
  write_meta(bytes, p, sinks);
  m.extra_offset = u32(words);  // zeroed by allocate()
  params.mark({TokenWords::meta, m.binding.param_offset, u32(words), sinks.empty() ? 0u : 1u});
  return m;
}

bool patch_attn_meta(std::uint8_t* bytes, const TokenWords& w, const ScoresParams& p, const std::vector<float>& sinks) {
  if (meta_words(p, sinks) != w.words) return false;
  // The tiles follow the queries' sequences: new ones need new dispatches.
  std::uint32_t q_seq_at = 0;
  std::memcpy(&q_seq_at, bytes + 4 * VKATTN_META_Q_SEQ, 4);
  if (std::memcmp(bytes + 4 * std::size_t{q_seq_at}, p.q_seq.data(), 4 * p.q_seq.size()) != 0) return false;
  write_meta(bytes, p, sinks);
  return true;
}

Dispatch attn_scores_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> q, KeySource keys,
                              std::shared_ptr<TensorImpl> scores, std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                              const StopAtBound* stop) {
  static_assert(sizeof(shader::AttnScoresParams) == 100);
  const std::uint32_t n_tokens = u32(q->shape[0]), n_heads = u32(q->shape[1]), head_dim = u32(q->shape[2]);
  const std::uint32_t n_keys = keys.n_keys, n_kv_heads = keys.n_kv_heads;
  const std::uint32_t group = n_heads / n_kv_heads;
  const std::uint32_t d4 = (head_dim + 3) / 4;

  // One key per invocation; the query tile lives in shared memory.
  const std::uint32_t wg = workgroup_size(ctx, 64);
  const std::uint32_t rows_fit = std::max(1u, ctx.limits.max_shared_memory / (d4 * 16));
  const std::uint32_t rows = tile_rows(std::min(kMaxRows, rows_fit), n_tokens, group, keys.meta_stride != 0, p.q_seq);
  const std::uint32_t row_tiles = u32(ceil_div(std::uint64_t{n_tokens} * group, rows));
  // Each invocation computes a rows x keys_per_lane block: every query value read serves
  // keys_per_lane keys, every key value read serves |rows| rows. Decode tiles (<= 4 rows)
  // take 8 keys; 8 x 8 accumulators spill registers on CPU devices, so larger tiles take 4.
  const std::uint32_t keys_per_lane = rows <= 4 ? 8 : 4;
  const std::uint32_t key_tiles = u32(ceil_div(n_keys, wg * keys_per_lane));
  const bool skip_past_bound = stop && keys.meta_stride != 0;
  std::uint32_t launched = skip_past_bound ? device_sized(ctx, std::uint64_t{n_kv_heads} * row_tiles, key_tiles) : key_tiles;
  // A workgroup striding over key tiles stays under llvmpipe's loop limit: the passes of a
  // tile, counted generously (its dims, and with rope on read each key's rotary pairs;
  // each row and key's visibility and score), bound the tiles a workgroup may walk. (At
  // 131k keys a few workgroups per row tile once walked them all: wrong scores.)
  const std::uint64_t tile_passes =
      16 + head_dim + (p.rope_on_read ? std::uint64_t{head_dim} * keys_per_lane : 0) + 3 * std::uint64_t{rows} * keys_per_lane;
  if (const std::uint64_t steps = cpu_steps_per_split(ctx, tile_passes)) {
    launched = u32(std::clamp<std::uint64_t>(ceil_div(key_tiles, steps), launched, std::max(key_tiles, 1u)));
  }

  const AttnMeta meta = attn_meta(params, p);

  // q and k through texel buffers when both have texel views (see tensor_load.glsl); the
  // query tile in shared memory is then only needed to rotate q on read.
  const bool texel = has_texel_view(*q) && has_texel_view(*keys.tensor);
  // With f16 keys, the lanes of a subgroup can share the query fetches by shuffles (see
  // attn_scores.comp), where the pipeline can require the subgroup size.
  const bool shuffle =
      texel && !p.rope_on_read && keys.tensor->dtype == DType::f16 && head_dim % 8 == 0 && uses_subgroup_shuffles(ctx.limits, wg);
  Dispatch d;
  d.op = "attn_scores";
  d.key = {shuffle ? KernelId::attn_scores_texel_shuffle
           : texel ? KernelId::attn_scores_texel
                   : KernelId::attn_scores,
           spec({{VKATTN_SPEC_WG_SIZE, wg},
                 {VKATTN_SPEC_SCORES_ROWS, rows},
                 {VKATTN_SPEC_SCORES_Q_VEC4, texel && !p.rope_on_read ? 1u : rows * d4},
                 {VKATTN_SPEC_SCORES_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                 {VKATTN_SPEC_SCORES_K_TYPE, keys.type},
                 {VKATTN_SPEC_SCORES_VEC, head_dim % (keys.wide() ? 8 : 4) == 0 ? 1u : 0u},
                 {VKATTN_SPEC_SCORES_KEYS, keys_per_lane},
                 {VKATTN_SPEC_SCORES_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                 {VKATTN_SPEC_SCORES_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                 {VKATTN_SPEC_SCORES_S_VEC4, n_keys % 4 == 0 ? 1u : 0u},
                 {VKATTN_SPEC_SCORES_SG, shuffle ? preferred_subgroup_size(ctx.limits) : 8u}})};
  d.key.spec = paged(std::move(d.key.spec), keys);
  d.key.subgroup_size = shuffle ? preferred_subgroup_size(ctx.limits) : 0u;
  const bool has_mask = mask != nullptr;
  Binding mask_binding = has_mask ? read_binding(std::move(mask)) : params.add_zero();
  const Binding key_pos = key_positions(params, keys, p);
  d.bindings = {read_binding(std::move(q), texel),
                read_binding(std::move(keys.tensor), texel),
                write_binding(std::move(scores)),
                std::move(mask_binding),
                meta.binding,
                key_pos};
  shader::AttnScoresParams pc{};
  pc.n_tokens = n_tokens;
  pc.n_heads = n_heads;
  pc.n_keys = n_keys;
  pc.head_dim = head_dim;
  pc.group = group;
  pc.rows_per_wg = rows;
  pc.row_tiles = row_tiles;
  pc.key_tiles = key_tiles;
  pc.skip_past_bound = skip_past_bound ? 1u : 0u;
  pc.key_tile_stride = launched;
  set_score_fields(pc, keys, p, meta, has_mask);
  d.set_push(pc);
  d.groups = std::uint64_t{n_kv_heads} * row_tiles * launched;
  return d;
}

Dispatch attn_softmax_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> scores,
                               std::shared_ptr<TensorImpl> probs, const std::vector<float>& sinks, const StopAtBound* stop) {
  static_assert(sizeof(shader::AttnSoftmaxParams) == 20);
  const std::uint32_t n_tokens = u32(scores->shape[0]), n_heads = u32(scores->shape[1]);
  const std::uint32_t n_keys = u32(scores->shape[2]);
  const std::uint32_t n_rows = n_tokens * n_heads;
  const bool subgroups = ctx.limits.subgroup_arithmetic && ctx.limits.subgroup_size > 0;
  // Many rows (prefill): subgroups take whole rows, several per workgroup, with no barrier;
  // the kernel shares the rows out at run time, so a subgroup size other than the reported
  // one only changes the speed. Few rows (decode): a workgroup per row, so that a long row
  // is spread over many invocations.
  const bool subgroup_rows = subgroups && n_rows >= kSoftmaxSubgroupRowsMin;
  // About 16 elements per invocation: short rows (prefill) take small workgroups, long
  // rows (decode, few of them) wide ones.
  const std::uint32_t wg =
      subgroup_rows ? workgroup_size(ctx, 64) : workgroup_size(ctx, std::clamp(std::bit_ceil(n_keys / 16), 32u, 128u));
  const std::uint32_t rows_per_wg = subgroup_rows ? std::max(1u, wg / ctx.limits.subgroup_size) : 1u;
  // Read through a storage buffer, the row stays in shared memory when it fits next to the
  // reduction scratch (the tile rounded up to a power of two so that few pipelines serve
  // all lengths). Read through a texel view, it is read twice instead: on CPU devices a
  // second texel read costs less than the trip through shared memory (a loop over lanes
  // per access; 0.31 against 0.45 ms for 32 rows of 4096 on lavapipe), and on GPUs a row
  // of a few KiB is still in cache the second time.
  const bool texel = has_texel_view(*scores);
  const std::uint32_t row_cap = std::bit_ceil(std::max(n_keys, 256u));
  const bool in_shared =
      !subgroup_rows && !texel && std::uint64_t{row_cap} * 4 + wg * 4 <= ctx.limits.max_shared_memory && row_cap <= 8192;
  const KernelId kernel =
      stop ? (subgroups ? (texel ? KernelId::attn_softmax_subgroup_texel_bound : KernelId::attn_softmax_subgroup_bound)
                        : (texel ? KernelId::attn_softmax_texel_bound : KernelId::attn_softmax_bound))
           : (subgroups ? (texel ? KernelId::attn_softmax_subgroup_texel : KernelId::attn_softmax_subgroup)
                        : (texel ? KernelId::attn_softmax_texel : KernelId::attn_softmax));
  Dispatch d;
  d.op = "attn_softmax";
  d.key = {kernel, spec({{VKATTN_SPEC_WG_SIZE, wg},
                         {VKATTN_SPEC_SOFTMAX_ROW_CAP, in_shared ? row_cap : 4u},
                         {VKATTN_SPEC_SOFTMAX_IN_SHARED, in_shared ? 1u : 0u},
                         {VKATTN_SPEC_SOFTMAX_VEC4, n_keys % 4 == 0 ? 1u : 0u},
                         {VKATTN_SPEC_SOFTMAX_SUBGROUP_ROWS, subgroup_rows ? rows_per_wg : 0u}})};
  d.bindings = {read_binding(std::move(scores), texel), write_binding(std::move(probs)),
                params.add(std::span<const float>(sinks))};
  if (stop) {
    d.bindings.push_back(params.add(std::span<const std::int32_t>(*stop->q_seq)));
    params.mark({TokenWords::q_seq, d.bindings[d.bindings.size() - 1].param_offset, u32(stop->q_seq->size())});
    d.bindings.push_back(read_binding(stop->slots));
  }
  d.set_push(shader::AttnSoftmaxParams{.n_rows = n_rows,
                                       .n_heads = n_heads,
                                       .n_keys = n_keys,
                                       .has_sinks = sinks.empty() ? 0u : 1u,
                                       .bound_offset = stop ? stop->offset : 0u});
  d.groups = ceil_div(n_rows, rows_per_wg);
  return d;
}

VRowGroups v_row_groups(const Context& ctx, std::uint32_t head_dim, bool f16, std::uint32_t target) {
  // 8 floats per invocation as well where 4 would take more than 64 invocations: at most
  // 72 for the widest rows (576), within the spec minimum's 128 per workgroup.
  const std::uint32_t per_lane = f16 || head_dim > 256 ? 8 : 4;
  const std::uint32_t lanes = (head_dim + per_lane - 1) / per_lane;
  return {per_lane, lanes, std::max<std::uint32_t>(1, std::min(target, ctx.limits.max_workgroup_invocations) / lanes)};
}

std::uint32_t key_splits(std::uint64_t base_groups, std::uint32_t n_keys, std::uint64_t split_words, const DeviceLimits& limits) {
  if (base_groups >= kSplitTargetGroups || n_keys < 2 * kMinKeysPerSplit) return 1;
  std::uint64_t splits = std::min<std::uint64_t>(ceil_div(kSplitTargetGroups, base_groups), n_keys / kMinKeysPerSplit);
  // The partial results must fit one storage buffer range.
  splits = std::min<std::uint64_t>(splits, limits.max_storage_buffer_range / (4 * std::max<std::uint64_t>(split_words, 1)));
  return u32(std::max<std::uint64_t>(splits, 1));
}

Dispatches attn_weighted_sum_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                        std::shared_ptr<TensorImpl> probs, KeySource values, std::shared_ptr<TensorImpl> out,
                                        const std::vector<std::int32_t>& q_seq, const StopAtBound* stop) {
  static_assert(sizeof(shader::AttnWsumParams) == 64);
  static_assert(sizeof(shader::AttnWsumReduceParams) == 8);
  const std::uint32_t n_tokens = u32(probs->shape[0]), n_heads = u32(probs->shape[1]);
  const std::uint32_t n_keys = values.n_keys, n_kv_heads = values.n_kv_heads, head_dim = values.head_dim;
  const std::uint32_t group = n_heads / n_kv_heads;
  const std::uint32_t rows = tile_rows(kMaxRows, n_tokens, group, values.meta_stride != 0, q_seq);
  const std::uint32_t row_tiles = u32(ceil_div(std::uint64_t{n_tokens} * group, rows));
  const std::uint64_t out_elems = std::uint64_t{n_tokens} * n_heads * head_dim;
  const std::uint64_t base_groups = std::uint64_t{n_kv_heads} * row_tiles;
  std::uint32_t splits = key_splits(base_groups, n_keys, out_elems, ctx.limits);
  // Each invocation takes 16 bytes of a v row (8 halves, or 4 floats), so every load is
  // one whole texel and each broadcast probability serves 8 (or 4) dims; ROWS * 8
  // accumulators stay at 64. Groups of invocations take turns over the keys, so that a
  // workgroup is more than one short v row (16 invocations for head_dim 128 in f16): about
  // 64 invocations when rows are few (decode), at least 32 (a GPU's SIMD width) otherwise,
  // where each group's share of keys is short and adding up the groups costs barriers.
  const bool f16 = values.wide();
  const VRowGroups v_row = v_row_groups(ctx, head_dim, f16, base_groups < kSplitTargetGroups ? 64 : 32);
  const std::uint32_t lanes = v_row.lanes, key_groups = v_row.groups;
  // A paged cache's values are read through its block table, which the kernel's
  // VKATTN_BOUND variant binds: that variant, stopping at the occupancy bound, which no
  // key a sequence holds is past.
  const StopAtBound paged_stop{values.slots, values.bound, &q_seq};
  if (values.page != 0 && !stop) stop = &paged_stop;
  std::uint32_t keys_per_split = u32(ceil_div(ceil_div(n_keys, splits), 8) * 8);  // whole batches of 8
  splits = u32(ceil_div(n_keys, keys_per_split));                                 // after rounding up, no split may be left empty
  if (stop && splits > 1) {
    // Over a cache, the splits stride over runs of kMinKeysPerSplit keys up to the bound.
    const std::uint32_t sized = device_sized(ctx, base_groups, ceil_div(n_keys, kMinKeysPerSplit));
    if (sized < splits) {
      splits = sized;
      keys_per_split = kMinKeysPerSplit;
    }
  }

  // Split keys write partial sums that a second pass adds up in split order.
  std::shared_ptr<TensorImpl> partial = splits > 1 ? scratch(std::uint64_t{splits} * out_elems) : out;
  const bool texel = has_texel_view(*probs) && has_texel_view(*values.tensor);
  Dispatch d;
  d.op = "attn_weighted_sum";
  const KernelId kernel = stop ? (texel ? KernelId::attn_weighted_sum_texel_bound : KernelId::attn_weighted_sum_bound)
                               : (texel ? KernelId::attn_weighted_sum_texel : KernelId::attn_weighted_sum);
  d.key = {kernel, spec({{VKATTN_SPEC_WG_SIZE, lanes * key_groups},
                         {VKATTN_SPEC_WSUM_ROWS, rows},
                         {VKATTN_SPEC_WSUM_V_TYPE, values.type},
                         {VKATTN_SPEC_WSUM_VEC, rows_aligned(values, v_row.per_lane) ? 1u : 0u},
                         {VKATTN_SPEC_WSUM_P_VEC4, n_keys % 4 == 0 ? 1u : 0u},
                         {VKATTN_SPEC_WSUM_KEY_GROUPS, key_groups},
                         {VKATTN_SPEC_WSUM_EIGHT, v_row.per_lane == 8 && !f16 ? 1u : 0u}})};
  d.key.spec = paged(std::move(d.key.spec), values);
  d.bindings = {read_binding(std::move(probs), texel), read_binding(std::move(values.tensor), texel), write_binding(partial),
                params.add(std::span<const std::int32_t>(q_seq))};
  params.mark({TokenWords::q_seq, d.bindings[3].param_offset, u32(q_seq.size())});
  if (stop) d.bindings.push_back(read_binding(stop->slots));
  d.set_push(shader::AttnWsumParams{.n_tokens = n_tokens,
                                    .n_heads = n_heads,
                                    .n_keys = n_keys,
                                    .head_dim = head_dim,
                                    .group = group,
                                    .rows_per_wg = rows,
                                    .row_tiles = row_tiles,
                                    .v_key_stride = values.key_stride,
                                    .v_head_stride = values.head_stride,
                                    .v_seq_stride = values.seq_stride,
                                    .off_q_seq = 0,
                                    .key_splits = splits,
                                    .keys_per_split = keys_per_split,
                                    .out_split_stride = splits > 1 ? u32(out_elems) : 0u,
                                    .v_scales = values.scales,
                                    .bound_offset = stop ? stop->offset : 0u});
  d.groups = base_groups * splits;
  Dispatches dispatches;
  dispatches.push_back(std::move(d));
  if (splits > 1) {
    Dispatch r;
    r.op = "attn_weighted_sum";  // its second pass: timings add up under the op's name
    const std::uint32_t rwg = workgroup_size(ctx, 64);
    r.key = {KernelId::attn_weighted_sum_reduce, spec({{VKATTN_SPEC_WG_SIZE, rwg}})};
    r.bindings = {read_binding(std::move(partial)), write_binding(std::move(out))};
    r.set_push(shader::AttnWsumReduceParams{.count = u32(out_elems), .splits = splits});
    r.groups = ceil_div(out_elems, rwg);
    dispatches.push_back(std::move(r));
  }
  return dispatches;
}

KeySource key_source(const KvSource& source, bool values) {
  if (!source.cache) return plain_keys(values ? source.v : source.k);
  const KvCacheImpl& cache = *source.cache;
  // A paged cache's values are read through its block table too.
  auto table = [&](bool v) { return !v || cache.config.paged ? cache.slots : nullptr; };
  if (!values) return cache_keys(cache, cache.k, table(false));
  if (cache.v) return cache_keys(cache, cache.v, table(true));
  // A latent cache: the values are K's rows cut to v_head_dim, read through K's strides
  // (and K's scales, by each element's index in K).
  KeySource v = cache_keys(cache, cache.k, table(true));
  v.head_dim = u32(value_head_dim(cache.config));
  return v;
}

Dispatches build(OpEnv& env, const ScoresCall& call) {
  return one(
      attn_scores_dispatch(env.ctx, env.params, call.q, key_source(call.keys, false), call.scores, call.mask, call.params));
}

Dispatches build(OpEnv& env, const SoftmaxCall& call) {
  return one(attn_softmax_dispatch(env.ctx, env.params, call.scores, call.probs, call.sinks));
}

Dispatches build(OpEnv& env, const WeightedSumCall& call) {
  return attn_weighted_sum_dispatches(env.ctx, env.params, env.scratch, call.probs, key_source(call.values, true), call.out,
                                      call.q_seq);
}

}  // namespace vkattn::detail
