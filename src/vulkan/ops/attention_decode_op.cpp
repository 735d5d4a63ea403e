// Host side of attn_decode.comp, the GPU-shaped decode kernel (KernelShape::gpu with few
// query rows): lanes per key row and tile rows within a register budget, keys per stage,
// the split count from the device's compute units, how key groups exchange their numbers
// (shuffles or shared memory) and how the splits are merged (by the last workgroup, or by
// attn_decode_merge.comp). docs/kernel-shapes.md describes the kernel.
#include <algorithm>
#include <bit>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>

#include "common/shape_math.hpp"
#include "vulkan/check.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

// Keys per key group per stage: 2, or on a GPU at head dims to 128, 4 (32 keys a stage of
// 128 invocations at 4 lanes a row: 64 KiB of K and V in flight per SM at depth 2). On an
// H200 (docs/gpu.md, 2026-11-27 late) 4 took 16k keys in 41 us per op against 49, and the
// grid's loads alone to 0.88 of the copy rate against 0.72; 1k and 4k keys no slower.
// Wider heads keep 2 (unmeasured: twice the staged registers).
constexpr std::uint32_t kKeys = 2, kGpuKeys = 4, kGpuKeysMaxDim = 128;
// Stages whose loads are in flight in a ring (attn_decode.comp): two, so that a stage is
// waited for while the next is loading, with no register copied while its load is in flight
// (docs/kernel-shapes.md). Bytes in flight per workgroup: kDepth x stage keys x K and V rows.
// A CPU device (lavapipe) takes one: its loads are cached reads with nothing to hide, and
// the ring ran at half the loop's speed there (docs/benchmarks.md).
constexpr std::uint32_t kDepth = 2;
constexpr std::uint32_t kMaxLiveFloats = 32;  // query (and accumulator) floats per invocation
// The row tiles alone fill the device from this many workgroups per compute unit on
// (prefill); fewer (decode) take the decode kernels, which split the keys.
constexpr std::uint32_t kRowTilesPerUnit = 4;
// Workgroups resident per compute unit, when nothing better is known: a kernel of ~130
// registers per invocation fits 2-3 workgroups of 128 on NVIDIA SMs and AMD CUs.
constexpr std::uint32_t kResident = 2;
constexpr std::uint32_t kMaxSplits = 64;
constexpr std::uint32_t kMergePairs = 512;  // attn_merge.glsl: MERGE_MAX_PAIRS (rows x splits)

// How a key row is spread over a group of |lanes| invocations for one tensor: |epl|
// elements per piece (16 bytes, or 8 of f16 when 4 elements per lane are all that fit),
// |pieces| per lane.
struct Pieces {
  std::uint32_t epl, pieces;
};

Pieces pieces_for(std::uint32_t head_dim, std::uint32_t lanes, bool f16) {
  const std::uint32_t per_lane = u32(ceil_div(head_dim, lanes));
  const std::uint32_t epl = f16 && per_lane >= 8 ? 8 : 4;
  return {epl, u32(ceil_div(per_lane, epl))};
}

// Rows per tile (a GQA group of up to 8, tile_rows) and lanes per key row, K's and V's
// widths |k_dim| and |v_dim|: lanes enough that each holds 16 bytes of a row and that
// rows x elements per lane stays within kMaxLiveFloats (64-register GPUs must not spill),
// at most |max_lanes|; rows fewer if need be.
struct KeyGroupPlan {
  std::uint32_t rows, lanes;
};

KeyGroupPlan plan_key_groups(std::uint32_t k_dim, std::uint32_t v_dim, bool k_wide, bool v_wide, std::uint32_t max_lanes,
                             std::uint32_t n_tokens, std::uint32_t group, bool per_seq, const std::vector<std::int32_t>& q_seq) {
  const std::uint32_t head_dim = std::max(k_dim, v_dim);
  auto lanes_for = [&](std::uint32_t rows) {
    const std::uint32_t for_registers = std::bit_ceil(u32(ceil_div(std::uint64_t{head_dim} * rows, kMaxLiveFloats)));
    const std::uint32_t for_pieces = std::bit_ceil(u32(ceil_div(head_dim, k_wide || v_wide ? 8 : 4)));
    return std::min(max_lanes, std::max(for_registers, for_pieces));
  };
  auto live = [&](std::uint32_t rows, std::uint32_t lanes) {
    const Pieces k = pieces_for(k_dim, lanes, k_wide), v = pieces_for(v_dim, lanes, v_wide);
    return rows * std::max(k.epl * k.pieces, v.epl * v.pieces);
  };
  std::uint32_t rows_cap = kMaxRows;
  while (rows_cap > 1 && live(rows_cap, lanes_for(rows_cap)) > kMaxLiveFloats) --rows_cap;
  const std::uint32_t rows = tile_rows(rows_cap, n_tokens, group, per_seq, q_seq);
  return {rows, lanes_for(rows)};
}

struct Plan {
  bool subgroup = false;  // exchanges by shuffles (else shared memory)
  std::uint32_t sg = 0, lanes = 0, rows = 0, keys = 0, n = 0, c = 0, wg = 0, merge_rows = 0;
  Pieces kp{}, vp{};
};

std::uint64_t shared_bytes(const Plan& p, bool last_merge) {
  const std::uint64_t g = p.wg / p.lanes, ve4 = p.vp.epl * p.vp.pieces / 4;
  std::uint64_t bytes = 2 * g * p.rows * 4 + std::uint64_t{p.merge_rows} * p.wg * ve4 * 16 + 4;
  if (!p.subgroup) bytes += std::uint64_t{p.wg} * p.n * 4 + 2 * g * p.n * 4;
  if (last_merge) bytes += 2 * kMergePairs * 4 + 2 * std::uint64_t{p.rows} * 4;
  return bytes;
}

// attn_decode_group.comp: ROWS rows of one KV head per workgroup, kGroupLanes lanes each,
// over stages of up to kGroupMaxKeys keys whose rows sit in shared memory as floats.
constexpr std::uint32_t kGroupLanes = 8;
constexpr std::uint32_t kGroupRows = 16;
constexpr std::uint32_t kGroupMaxKeys = 16;
// The stage's rows take at most this much shared memory, so that an AMD CU (64 KiB) holds
// two workgroups and an NVIDIA SM several.
constexpr std::uint64_t kGroupTileBytes = 32 * 1024;

// attn_decode_group.comp's shared arrays: K (and V) rows, per key kp_sh, ks_sh, kj_sh, and wide_sh.
std::uint64_t group_tile_bytes(std::uint32_t keys, std::uint32_t dk4, std::uint32_t dv4, bool v_from_k) {
  return std::uint64_t{keys} * (dk4 + (v_from_k ? 0 : dv4)) * 16 + std::uint64_t{keys} * 12 + 8 + (v_from_k ? 16 : 0);
}

}  // namespace

bool subgroups_fit(const DeviceLimits& l) {
  const std::uint32_t sg = preferred_subgroup_size(l);
  return l.subgroup_shuffle && l.subgroup_size_control && sg >= 1 && std::has_single_bit(sg) && sg <= l.max_workgroup_invocations;
}

bool values_in_keys(const KeySource& keys, const KeySource& values) {
  return values.tensor == keys.tensor && values.type == keys.type && values.key_stride == keys.key_stride &&
         values.head_stride == keys.head_stride && values.seq_stride == keys.seq_stride && values.scales == keys.scales &&
         values.head_dim <= keys.head_dim;
}

bool decode_preferred(const Context& ctx, std::uint32_t n_tokens, std::uint32_t n_heads, std::uint32_t n_kv_heads) {
  const std::uint64_t tiles = ceil_div(std::uint64_t{n_tokens} * (n_heads / n_kv_heads), kMaxRows) * n_kv_heads;
  return tiles < std::uint64_t{kRowTilesPerUnit} * compute_units(ctx);
}

std::uint64_t most_splits(std::uint32_t rows) { return std::min<std::uint64_t>(kMaxSplits, kMergePairs / rows); }

std::uint32_t default_depth(const Context& ctx) { return ctx.physical.cpu() ? 1 : kDepth; }
std::uint32_t default_keys(const Context& ctx, std::uint32_t widest_dim) {
  return !ctx.physical.cpu() && widest_dim <= kGpuKeysMaxDim ? kGpuKeys : kKeys;
}

std::uint64_t cpu_steps_per_split(const Context& ctx, std::uint64_t per_step) {
  if (!ctx.physical.cpu()) return 0;
  return std::max<std::uint64_t>(1, kCpuLoopLimit / std::max<std::uint64_t>(1, per_step));
}

std::uint64_t decode_splits(const Context& ctx, std::uint64_t base_groups, std::uint32_t n_keys, std::uint32_t stage,
                            std::uint32_t rows, std::uint64_t n_rows, std::uint32_t v4) {
  const DecodeTuning& tune = ctx.decode;
  const std::uint64_t n_stages = ceil_div(n_keys, stage);
  std::uint64_t splits = 1;
  const std::uint64_t target = std::uint64_t{compute_units(ctx)} * (tune.resident ? tune.resident : kResident);
  if (tune.keys_per_split) {
    splits = ceil_div(n_stages, ceil_div(tune.keys_per_split, stage));
  } else if (base_groups < target) {
    splits = std::clamp<std::uint64_t>(target / base_groups, 1, std::max<std::uint64_t>(1, n_stages / 2));
  }
  splits = std::min(splits, most_splits(rows));
  // As many splits as give each the same number of stages: 1024 stages over 33 splits
  // leave one split a 32nd stage, which the whole op waits for (a one-stage tail); 32 do not.
  if (tune.divide) splits = ceil_div(n_stages, ceil_div(n_stages, splits));
  return std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(splits, ctx.limits.max_storage_buffer_range / (4 * n_rows * (v4 * 4 + 2))));
}

DecodeOutputs decode_outputs(ParamArena& params, const ScratchFn& scratch, const std::shared_ptr<TensorImpl>& out,
                             std::uint64_t splits, const ScratchLayout& layout, bool second_pass) {
  return {splits > 1 ? write_binding(scratch(layout.lists)) : params.add_zero(),  // the partials alone
          second_pass ? params.add_zero() : write_binding(out)};
}

Dispatches finish_decode(const Context& ctx, ParamArena& params, Dispatch d, std::shared_ptr<TensorImpl> q, const KeySource& keys,
                         const KeySource& values, std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                         const ScoresParams& p, const std::vector<float>& sinks, const AttnMeta& meta, DecodeOutputs o,
                         const AttnPlan& plan, std::uint64_t base_groups, bool second_pass) {
  const bool has_mask = mask != nullptr;
  Binding mask_binding = has_mask ? read_binding(std::move(mask)) : params.add_zero();
  const Binding key_pos = key_positions(params, keys, p);
  d.key.spec = paged(std::move(d.key.spec), keys);
  // Packed (clang-format would put one item per line).
  // clang-format off
  d.bindings = {read_binding(std::move(q)), read_binding(keys.tensor),
                read_binding(values.tensor), o.out, std::move(mask_binding), meta.binding, key_pos,
                o.partials};
  // clang-format on
  const shader::AttnParams pc = attn_params(d.bindings[0].tensor->shape, keys, values, p, meta, has_mask, !sinks.empty(), plan);
  d.set_push(pc);
  d.groups = base_groups * plan.splits;
  Dispatches ds;
  ds.push_back(std::move(d));
  if (second_pass) {
    Dispatch m;
    m.op = "attention";  // its second pass: timings add up under the op's name
    m.key = {KernelId::attn_decode_merge,
             spec({{VKATTN_SPEC_WG_SIZE, workgroup_size(ctx, 128)}, {VKATTN_SPEC_MERGE_ROWS, plan.rows}})};
    m.bindings = {o.partials, write_binding(std::move(out)), meta.binding};
    m.bindings[0].write = false;
    m.set_push(pc);
    m.groups = base_groups;
    ds.push_back(std::move(m));
  }
  return ds;
}

RowTiles row_tiles(const Context& ctx, const TensorImpl& q, const KeySource& keys, const KeySource& values, std::uint32_t rows,
                   std::uint32_t stage) {
  RowTiles rt;
  rt.rows = rows;
  rt.tiles = u32(ceil_div(q.shape[0] * (q.shape[1] / keys.n_kv_heads), rows));
  rt.base_groups = std::uint64_t{keys.n_kv_heads} * rt.tiles;
  rt.splits = decode_splits(ctx, rt.base_groups, keys.n_keys, stage, rows, q.shape[0] * q.shape[1], (values.head_dim + 3) / 4);
  return rt;
}

ScratchLayout scratch_layout(std::uint64_t splits, const TensorImpl& q, std::uint32_t v4, std::uint32_t mask_keys) {
  const std::uint64_t n_rows = q.shape[0] * q.shape[1];
  const std::uint64_t ml_offset = splits * n_rows * v4 * 4, lists = ml_offset + 2 * splits * n_rows;
  return {ml_offset, lists, lists + q.shape[0] * (std::uint64_t{mask_keys} + 1)};
}

Dispatches finish_row_tiles(const Context& ctx, ParamArena& params, const ScratchFn& scratch, Dispatch d,
                            std::shared_ptr<TensorImpl> q, const KeySource& keys, const KeySource& values,
                            std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                            const std::vector<float>& sinks, const RowTiles& rt, KeyListing listing) {
  const std::uint32_t mask_keys = listing.keys;
  const ScratchLayout layout = scratch_layout(rt, *q, values, mask_keys);
  const std::uint64_t ml_offset = layout.ml_offset;
  const AttnMeta meta = attn_meta(params, p, sinks);
  DecodeOutputs o;
  std::optional<Dispatch> lists;
  if (mask_keys != 0) {
    // One scratch for the partials and the lists (attn_decode_group.comp finds them after
    // the partials' (max, sum) pairs), also with one split.
    static_assert(sizeof(shader::AttnMaskKeysParams) == 16);
    const std::uint32_t n_tokens = u32(q->shape[0]);
    std::shared_ptr<TensorImpl> buffer = scratch(layout.words);
    o = {write_binding(buffer), rt.splits > 1 ? params.add_zero() : write_binding(out)};
    Dispatch c;
    c.op = "attention";  // its first pass: timings add up under the op's name
    // A key list is sorted in shared memory: a power of two of words, at least a workgroup.
    const std::uint32_t wg = workgroup_size(ctx, 128);
    c.key = {KernelId::attn_mask_keys,
             spec({{VKATTN_SPEC_WG_SIZE, wg},
                   {VKATTN_SPEC_MASK_KEYS_MODE, listing.from_list ? 1u : 0u},
                   {VKATTN_SPEC_MASK_KEYS_WORDS, listing.from_list ? std::max(std::bit_ceil(mask_keys), wg) : wg}})};
    c.bindings = {read_binding(mask), write_binding(std::move(buffer))};
    if (listing.from_list) mask.reset();  // the kernel reads the lists alone
    c.set_push(shader::AttnMaskKeysParams{
        .n_tokens = n_tokens, .n_keys = keys.n_keys, .max_keys = mask_keys, .list_offset = u32(layout.lists)});
    c.groups = n_tokens;
    lists = std::move(c);
  } else {
    o = decode_outputs(params, scratch, out, rt.splits, layout, rt.splits > 1);
  }
  d.op = "attention";
  Dispatches ds =
      finish_decode(ctx, params, std::move(d), std::move(q), keys, values, std::move(out), std::move(mask), p, sinks, meta, o,
                    {rt.rows, rt.tiles, u32(rt.splits), 0u, ml_offset, meta.extra_offset}, rt.base_groups, rt.splits > 1);
  if (!lists) return ds;
  Dispatches all;
  all.push_back(std::move(*lists));
  for (Dispatch& x : ds) all.push_back(std::move(x));
  return all;
}

bool decode_attention_usable(const Context& ctx) {
  return ctx.limits.max_storage_buffers >= 8 && ctx.limits.max_workgroup_invocations >= 32;
}

namespace {

// attn_decode_group's plan: rows per tile (the real ones, and the workgroup's, which fills
// whole subgroups), vec4s per lane, keys per stage, the fewest splits (CPU devices); keys
// == 0 where it cannot run.
struct GroupPlan {
  std::uint32_t rows = 0, wg_rows = 0, wg = 0, sg = 0, lanes = 0, qp = 0, vp = 0, keys = 0;
  std::uint64_t min_splits = 1;
  bool v_from_k = false;
};

// The loop iterations one of attn_decode_group's invocations runs a stage, as lavapipe
// counts them (each loop's exit one more; bisected at four shapes, exact): the stage loop,
// its three staging loops, and per key the loop over keys and the lanes' shuffles (neither
// unrolled there).
std::uint64_t group_stage_iterations(const GroupPlan& g, bool packed) {
  const auto staging = [&](std::uint64_t items) { return ceil_div(items, g.wg) + 1; };
  // The packed variant's chains of 4 query vec4s per key (attn_packed_f16.glsl's QK_CHUNK),
  // counted as lavapipe runs them, neither loop unrolled: the chains and their exit, each
  // chain's vec4s and its exit (bisected on absorbed MLA's shape, 18 vec4s a lane: counting
  // the chains alone let 4k keys run in one split, past the limit, with wrong results).
  const std::uint64_t chunks = ceil_div(g.qp, 4);
  const std::uint64_t chains = packed ? chunks + 1 + g.qp + chunks : 0;
  return 3 + staging(std::uint64_t{g.keys} * g.qp * g.lanes) +
         (g.v_from_k ? 0 : staging(std::uint64_t{g.keys} * g.vp * g.lanes)) + staging(g.keys) +
         std::uint64_t{g.keys} * (2 + std::countr_zero(g.lanes) + chains);
}

// |scanned|: the most keys a tile's stages go through (0: every key).
GroupPlan plan_group(const Context& ctx, const KeySource& keys, const KeySource& values, std::uint32_t n_tokens,
                     std::uint32_t group, const ScoresParams& p, bool packed, std::uint32_t scanned = 0) {
  GroupPlan g;
  const DecodeTuning::Kernel kernel = ctx.decode.kernel;
  const std::uint32_t k_dim = keys.head_dim, v_dim = values.head_dim;
  const bool wanted =
      kernel == DecodeTuning::Kernel::group || (kernel == DecodeTuning::Kernel::automatic &&
                                                std::uint64_t{n_tokens} * group >= kGroupRows && std::max(k_dim, v_dim) > 256);
  if (!wanted || !subgroups_fit(ctx.limits)) return g;
  g.sg = preferred_subgroup_size(ctx.limits);
  // $VKATTN_DECODE's lanes=N trades registers (fewer vec4s per lane) for rows per tile.
  g.lanes = ctx.decode.lanes ? std::clamp(std::bit_ceil(ctx.decode.lanes), 4u, 32u) : kGroupLanes;
  if (g.sg < g.lanes) return g;
  g.rows = tile_rows(std::max(1u, kGroupRows * kGroupLanes / g.lanes), n_tokens, group, keys.meta_stride != 0,
                     p.q_seq);  // 128 invocations
  // Tokens of several sequences keep a tile within one token: with small groups that
  // leaves few rows to share each stage, and attn_decode takes them unless forced.
  if (kernel == DecodeTuning::Kernel::automatic && g.rows < kGroupRows) return g;
  // Whole subgroups of rows.
  g.wg = u32(ceil_div(g.rows * g.lanes, g.sg)) * g.sg;
  g.wg_rows = g.wg / g.lanes;
  if (g.wg > ctx.limits.max_workgroup_invocations) return g;
  g.qp = u32(ceil_div(k_dim, 4 * g.lanes));
  g.vp = u32(ceil_div(v_dim, 4 * g.lanes));
  g.v_from_k = values_in_keys(keys, values);
  if (g.v_from_k && p.rope_on_read) return g;  // the staged K rows, rotated, cannot serve as V
  const std::uint64_t budget = std::min<std::uint64_t>(ctx.limits.max_shared_memory, kGroupTileBytes);
  const std::uint32_t max_keys = ctx.decode.keys ? std::bit_floor(ctx.decode.keys) : kGroupMaxKeys;
  for (std::uint32_t k = max_keys; k >= 1 && !g.keys; k /= 2) {
    if (group_tile_bytes(k, g.qp * g.lanes, g.vp * g.lanes, g.v_from_k) <= budget) g.keys = k;
  }
  if (const std::uint64_t steps = g.keys ? cpu_steps_per_split(ctx, group_stage_iterations(g, packed)) : 0) {
    g.min_splits = ceil_div(ceil_div(scanned ? scanned : keys.n_keys, g.keys), steps);
    if (g.min_splits > most_splits(g.rows)) g.keys = 0;  // more keys than splits can hold: attn_decode
  }
  return g;
}

// A sparse mask's lists on the group kernel: where a tile stays within one token (it
// reads one token's list), the partials and lists fit one buffer range, and on a CPU device
// attn_mask_keys's scan of a mask row stays within the loop limit (a key list's sort of at
// most kMaxKeyList words does); 0 where it reads every key.
std::uint32_t listed_keys(const Context& ctx, const GroupPlan& g, const RowTiles& rt, KeyListing listing, bool has_mask,
                          const TensorImpl& q, const KeySource& keys, const KeySource& values) {
  const std::uint64_t n_tokens = q.shape[0], group = q.shape[1] / keys.n_kv_heads;
  if (listing.keys == 0 || !has_mask || (n_tokens > 1 && group % g.rows != 0)) return 0;
  if (scratch_layout(rt, q, values, listing.keys).words * 4 > ctx.limits.max_storage_buffer_range) return 0;
  const std::uint64_t wg = workgroup_size(ctx, 128);
  if (!listing.from_list && ctx.physical.cpu() && 2 * ceil_div(keys.n_keys, wg) + wg + 8 > kCpuLoopLimit) return 0;
  return listing.keys;
}

// The group kernel's row tiles: its splits at least the fewest the CPU loop limit allows.
RowTiles group_row_tiles(const Context& ctx, const GroupPlan& g, const TensorImpl& q, const KeySource& keys,
                         const KeySource& values) {
  RowTiles rt = row_tiles(ctx, q, keys, values, g.rows, g.keys);
  rt.splits = std::max(rt.splits, g.min_splits);
  return rt;
}

// |listing|: lists listed_keys has taken, or none.
Dispatches group_decode_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch, const GroupPlan& g,
                                   const RowTiles& rt, std::shared_ptr<TensorImpl> q, const KeySource& keys,
                                   const KeySource& values, std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                                   const ScoresParams& p, const std::vector<float>& sinks, bool packed, KeyListing listing) {
  const std::uint32_t head_dim = u32(q->shape[2]);
  Dispatch d;
  d.key = {packed ? KernelId::attn_decode_group_f16 : KernelId::attn_decode_group,
           spec({{VKATTN_SPEC_WG_SIZE, g.wg},
                 {VKATTN_SPEC_DECODE_ROWS, g.wg_rows},
                 {VKATTN_SPEC_DECODE_LANES, g.lanes},
                 {VKATTN_SPEC_DECODE_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_K_TYPE, keys.type},
                 {VKATTN_SPEC_DECODE_V_TYPE, values.type},
                 {VKATTN_SPEC_DECODE_K_PIECES, g.qp},
                 {VKATTN_SPEC_DECODE_V_PIECES, g.vp},
                 {VKATTN_SPEC_DECODE_K_ALIGNED, rows_aligned(keys, 4) ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_V_ALIGNED, rows_aligned(values, 4) ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_KEYS, g.keys},
                 {VKATTN_SPEC_DECODE_MULTI_SEQ, keys.meta_stride != 0 && keys.n_seqs > 1 ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_Q_ALIGNED, head_dim % 4 == 0 ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_V_FROM_K, g.v_from_k ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                 {VKATTN_SPEC_DECODE_MASK_KEYS, listing.keys}})};
  d.key.subgroup_size = g.sg;
  return finish_row_tiles(ctx, params, scratch, std::move(d), std::move(q), keys, values, std::move(out), std::move(mask), p,
                          sinks, rt, listing);
}

}  // namespace

std::optional<Dispatches> listed_group_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                  std::shared_ptr<TensorImpl> q, const KeySource& keys, const KeySource& values,
                                                  std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                                                  const ScoresParams& p, const std::vector<float>& sinks,
                                                  AttentionPrecision precision, KeyListing listing) {
  if (!(ctx.shape == KernelShape::gpu || ctx.decode.kernel == DecodeTuning::Kernel::group) || !decode_attention_usable(ctx)) {
    return std::nullopt;
  }
  const bool packed = ctx.decode.packed && packed_f16(ctx, precision);
  // A key list never overflows: the kernel's scan is at most its width (repeats keep their
  // places as empty keys, so a list wider than n_keys may scan past n_keys).
  const std::uint32_t scanned = listing.from_list ? listing.keys : keys.n_keys;
  const GroupPlan g = plan_group(ctx, keys, values, u32(q->shape[0]), u32(q->shape[1]) / keys.n_kv_heads, p, packed, scanned);
  if (!g.keys) return std::nullopt;
  const RowTiles rt = group_row_tiles(ctx, g, *q, keys, values);
  if (!listed_keys(ctx, g, rt, listing, mask != nullptr, *q, keys, values)) return std::nullopt;
  return group_decode_dispatches(ctx, params, scratch, g, rt, std::move(q), keys, values, std::move(out), std::move(mask), p,
                                 sinks, packed, listing);
}

Dispatches decode_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                       std::shared_ptr<TensorImpl> q, KeySource keys, KeySource values,
                                       std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                       const std::vector<float>& sinks, AttentionPrecision precision) {
  const DecodeTuning& tune = ctx.decode;
  const bool packed = tune.packed && packed_f16(ctx, precision);
  if (const GroupPlan g = plan_group(ctx, keys, values, u32(q->shape[0]), u32(q->shape[1]) / keys.n_kv_heads, p, packed);
      g.keys) {
    const RowTiles rt = group_row_tiles(ctx, g, *q, keys, values);  // before q is moved
    return group_decode_dispatches(ctx, params, scratch, g, rt, std::move(q), keys, values, std::move(out), std::move(mask), p,
                                   sinks, packed, {});
  }
  const std::uint32_t n_tokens = u32(q->shape[0]), n_heads = u32(q->shape[1]), head_dim = u32(q->shape[2]);
  const std::uint32_t n_keys = keys.n_keys, n_kv_heads = keys.n_kv_heads, group = n_heads / n_kv_heads;
  const std::uint32_t d4 = (head_dim + 3) / 4;
  const bool k_wide = keys.wide(), v_wide = values.wide();

  Plan plan;
  plan.subgroup = tune.reduce != DecodeTuning::Reduce::shared && subgroups_fit(ctx.limits);
  if (tune.reduce == DecodeTuning::Reduce::subgroup && !plan.subgroup) {
    throw Error(ErrorCode::unsupported, "VKATTN_DECODE=reduce=subgroup: this device lacks subgroup shuffles or size control",
                "VKATTN_DECODE", 0, "attention");
  }
  plan.sg = plan.subgroup ? preferred_subgroup_size(ctx.limits) : 0;
  // At most a subgroup of lanes per key row (shuffles), or 32 (shared memory).
  const std::uint32_t max_lanes = std::min(plan.subgroup ? plan.sg : 32u, std::bit_ceil(d4));
  const std::uint32_t v_dim = values.head_dim, v4 = (v_dim + 3) / 4;
  const KeyGroupPlan kg =
      plan_key_groups(head_dim, v_dim, k_wide, v_wide, max_lanes, n_tokens, group, keys.meta_stride != 0, p.q_seq);
  plan.rows = kg.rows;
  plan.lanes = tune.lanes ? std::min(std::bit_ceil(tune.lanes), max_lanes) : kg.lanes;
  plan.keys = tune.keys ? tune.keys : default_keys(ctx, std::max(head_dim, v_dim));
  plan.n = std::bit_ceil(plan.rows * plan.keys);
  plan.c = std::max(1u, plan.n / plan.lanes);
  plan.kp = pieces_for(head_dim, plan.lanes, k_wide);
  plan.vp = pieces_for(v_dim, plan.lanes, v_wide);
  const std::uint32_t row_tiles = u32(ceil_div(std::uint64_t{n_tokens} * group, plan.rows));

  // Splits: about |resident| workgroups per compute unit in one wave, each at least two
  // stages long (something for the pipeline to overlap), within the merge's limits.
  const std::uint64_t n_rows = std::uint64_t{n_tokens} * n_heads;
  const std::uint64_t base_groups = std::uint64_t{n_kv_heads} * row_tiles;
  const bool last_merge = merge_in_dispatch(tune.merge, ctx.physical.portability_subset);

  // 128 invocations (4 NVIDIA warps, 2 AMD wave64s), a multiple of the subgroup; fewer
  // rows merged at once if shared memory is short.
  plan.wg = std::max({plan.lanes, plan.sg, workgroup_size(ctx, tune.workgroup ? tune.workgroup : 128)});
  plan.merge_rows = plan.rows;
  while (shared_bytes(plan, last_merge) > ctx.limits.max_shared_memory && plan.merge_rows > 1) --plan.merge_rows;
  while (shared_bytes(plan, last_merge) > ctx.limits.max_shared_memory && plan.wg > std::max(plan.lanes, plan.sg)) {
    plan.wg /= 2;
  }
  if (shared_bytes(plan, last_merge) > ctx.limits.max_shared_memory) {
    throw Error(
        ErrorCode::unsupported,
        "attention needs more shared memory than maxComputeSharedMemorySize = " + std::to_string(ctx.limits.max_shared_memory),
        "maxComputeSharedMemorySize", 0, "attention");
  }
  const std::uint32_t stage = plan.wg / plan.lanes * plan.keys;
  // Splits take runs of |run| stages: the split count is one of runs.
  const std::uint32_t run = tune.interleave && tune.run ? tune.run : 1;
  const std::uint64_t splits = decode_splits(ctx, base_groups, n_keys, stage * run, plan.rows, n_rows, v4);
  const bool last = splits > 1 && last_merge;
  const ScratchLayout layout = scratch_layout(splits, *q, v4, 0);
  const std::uint64_t ml_offset = layout.ml_offset;
  const AttnMeta meta = attn_meta(params, p, sinks, last ? u32(base_groups) : 0u);
  // With a second pass, the kernel leaves out to it.
  const DecodeOutputs o = decode_outputs(params, scratch, out, splits, layout, splits > 1 && !last);

  Dispatch d;
  d.op = "attention";
  const KernelId kernel = plan.subgroup ? (last ? KernelId::attn_decode_last : KernelId::attn_decode)
                                        : (last ? KernelId::attn_decode_shared_last : KernelId::attn_decode_shared);
  d.key = {kernel, spec({{VKATTN_SPEC_WG_SIZE, plan.wg},
                         {VKATTN_SPEC_DECODE_ROWS, plan.rows},
                         {VKATTN_SPEC_DECODE_LANES, plan.lanes},
                         {VKATTN_SPEC_DECODE_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_K_TYPE, keys.type},
                         {VKATTN_SPEC_DECODE_V_TYPE, values.type},
                         {VKATTN_SPEC_DECODE_K_EPL, plan.kp.epl},
                         {VKATTN_SPEC_DECODE_K_PIECES, plan.kp.pieces},
                         {VKATTN_SPEC_DECODE_V_EPL, plan.vp.epl},
                         {VKATTN_SPEC_DECODE_V_PIECES, plan.vp.pieces},
                         {VKATTN_SPEC_DECODE_K_ALIGNED, head_dim % plan.kp.epl == 0 ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_V_ALIGNED, rows_aligned(values, plan.vp.epl) ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_KEYS, plan.keys},
                         {VKATTN_SPEC_DECODE_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_MULTI_SEQ, keys.meta_stride != 0 && keys.n_seqs > 1 ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_N, plan.n},
                         {VKATTN_SPEC_DECODE_C, plan.c},
                         {VKATTN_SPEC_DECODE_MERGE_ROWS, plan.merge_rows},
                         {VKATTN_SPEC_DECODE_Q_ALIGNED, head_dim % 8 == 0 ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_INTERLEAVE, tune.interleave ? 1u : 0u},
                         {VKATTN_SPEC_DECODE_PROBE, (tune.load_only ? 1u : 0u) | tune.skip << 1},
                         {VKATTN_SPEC_DECODE_DEPTH, tune.depth ? tune.depth : default_depth(ctx)},
                         {VKATTN_SPEC_DECODE_RUN, run},
                         {VKATTN_SPEC_DECODE_LAZY_MAX, plan.subgroup && tune.lazy_max ? 1u : 0u}})};
  d.key.subgroup_size = plan.sg;
  return finish_decode(ctx, params, std::move(d), std::move(q), keys, values, std::move(out), std::move(mask), p, sinks, meta, o,
                       {plan.rows, row_tiles, u32(splits), 0u, ml_offset, meta.extra_offset}, base_groups, splits > 1 && !last);
}

}  // namespace vkattn::detail
