// Host side of attn_fused_coalesced.comp, the fused attention kernel shaped for GPUs
// (KernelShape::gpu): key groups of lanes per key row, tile rows bounded by registers,
// workgroup shape within shared memory, and keys split so that every compute unit gets
// several workgroups.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>

#include "common/shape_math.hpp"
#include "vulkan/check.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

constexpr std::uint32_t kMaxLiveFloats = 32;  // query (and accumulator) floats per invocation
constexpr std::uint32_t kBatch = 4;           // keys per key group per step: loads in flight
constexpr std::uint32_t kWorkgroupsPerUnit = 4;

std::uint64_t shared_bytes(std::uint32_t rows, std::uint32_t d4, std::uint32_t wg, std::uint32_t ke, std::uint32_t ve,
                           bool k_exchange) {
  return std::uint64_t{rows} * d4 * 16 + std::uint64_t{wg} * ve * 4 + std::uint64_t{wg} * 8 +
         (k_exchange ? std::uint64_t{wg} * ke * 4 : 4);
}

// A developer's knob for tuning on a device at hand (docs/gpu.md):
// VKATTN_TUNE_COALESCED="batch,workgroup,lanes,early,heads_first" overrides the planned
// values (0 keeps one; early is 2, "planned", unless given).
struct Tuning {
  std::uint32_t batch = 0, wg = 0, lanes = 0, early = 2, heads_first = 0;
};
Tuning tuning() {
  Tuning t;
  if (const char* env = std::getenv("VKATTN_TUNE_COALESCED")) {
    std::sscanf(env, "%u,%u,%u,%u,%u", &t.batch, &t.wg, &t.lanes, &t.early, &t.heads_first);
  }
  return t;
}

}  // namespace

Pieces pieces_for(std::uint32_t head_dim, std::uint32_t lanes, bool f16) {
  const std::uint32_t per_lane = u32(ceil_div(head_dim, lanes));
  const std::uint32_t epl = f16 && per_lane >= 8 ? 8 : 4;
  return {epl, u32(ceil_div(per_lane, epl))};
}

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

std::uint32_t preferred_subgroup_size(const DeviceLimits& limits) {
  if (!limits.subgroup_size_control) return limits.subgroup_size;
  return std::clamp(16u, limits.subgroup_min_size, limits.subgroup_max_size);
}

std::uint32_t compute_units(const Context& ctx) {
  if (ctx.limits.compute_units) return ctx.limits.compute_units;
  // Unknown: a mid-sized discrete GPU, a small integrated one. Too high a guess costs a
  // larger merge; too low leaves units idle.
  const std::string& type = ctx.physical.info.type;
  return type == "discrete" ? 32 : 8;
}

bool coalesced_attention_usable(const Context& ctx) {
  const DeviceLimits& l = ctx.limits;
  const std::uint32_t sg = preferred_subgroup_size(l);
  return l.subgroup_shuffle && l.subgroup_size_control && sg >= 1 && std::has_single_bit(sg) &&
         sg <= l.max_workgroup_invocations && l.max_storage_buffers >= 7;
}

bool coalesced_attention_preferred(const Context& ctx, std::uint32_t n_tokens, std::uint32_t n_heads, std::uint32_t n_kv_heads) {
  const std::uint64_t tiles = ceil_div(std::uint64_t{n_tokens} * (n_heads / n_kv_heads), kMaxRows) * n_kv_heads;
  return tiles < std::uint64_t{kWorkgroupsPerUnit} * compute_units(ctx);
}

Dispatches coalesced_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                          std::shared_ptr<TensorImpl> q, KeySource keys, KeySource values,
                                          std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                                          const ScoresParams& p, const std::vector<float>& sinks) {
  const std::uint32_t n_tokens = u32(q->shape[0]), n_heads = u32(q->shape[1]), head_dim = u32(q->shape[2]);
  const std::uint32_t n_keys = keys.n_keys, n_kv_heads = keys.n_kv_heads;
  const std::uint32_t group = n_heads / n_kv_heads;
  const std::uint32_t d4 = (head_dim + 3) / 4;
  const bool k_f16 = keys.wide(), v_f16 = values.wide();  // 8 elements per 16 bytes or fewer
  const std::uint32_t sg = preferred_subgroup_size(ctx.limits);

  // At most a subgroup of lanes per key row: the dot products are summed by shuffles.
  const std::uint32_t v_dim = values.head_dim;
  const KeyGroupPlan kg = plan_key_groups(head_dim, v_dim, k_f16, v_f16, std::min(sg, std::bit_ceil(d4)), n_tokens, group,
                                          keys.meta_stride != 0, p.q_seq);
  const std::uint32_t rows = kg.rows;
  const Tuning tune = tuning();
  const std::uint32_t lanes = tune.lanes ? std::min(tune.lanes, sg) : kg.lanes;
  const std::uint32_t batch = tune.batch ? tune.batch : kBatch;
  const Pieces kp = pieces_for(head_dim, lanes, k_f16), vp = pieces_for(v_dim, lanes, v_f16);
  const std::uint32_t row_tiles = u32(ceil_div(std::uint64_t{n_tokens} * group, rows));

  // 128 invocations (4 NVIDIA warps, 2 AMD wave64s), fewer if shared memory is short; a
  // multiple of the subgroup size, whose subgroups the pipeline requires full.
  const bool k_exchange = p.rope_on_read && p.rope.layout == RopeLayout::half;
  std::uint32_t wg = std::max(sg, workgroup_size(ctx, tune.wg ? tune.wg : 128));
  while (wg > sg &&
         shared_bytes(rows, d4, wg, kp.epl * kp.pieces, vp.epl * vp.pieces, k_exchange) > ctx.limits.max_shared_memory) {
    wg /= 2;
  }
  if (shared_bytes(rows, d4, wg, kp.epl * kp.pieces, vp.epl * vp.pieces, k_exchange) > ctx.limits.max_shared_memory) {
    throw Error(
        ErrorCode::unsupported,
        "attention needs more shared memory than maxComputeSharedMemorySize = " + std::to_string(ctx.limits.max_shared_memory),
        "maxComputeSharedMemorySize", 0, "attention");
  }
  const std::uint32_t step = (wg / lanes) * batch;  // keys a workgroup takes per step

  // Splits: about kWorkgroupsPerUnit workgroups per compute unit, each split at least two
  // steps long, and the partial results within one buffer range.
  const std::uint64_t n_rows = std::uint64_t{n_tokens} * n_heads;
  const std::uint64_t base_groups = std::uint64_t{n_kv_heads} * row_tiles;
  const std::uint64_t target = std::uint64_t{kWorkgroupsPerUnit} * compute_units(ctx);
  std::uint64_t splits = 1;
  if (base_groups < target) {
    splits = std::min<std::uint64_t>(ceil_div(target, base_groups), std::max<std::uint64_t>(1, n_keys / (2 * step)));
    splits = std::min<std::uint64_t>(splits, ctx.limits.max_storage_buffer_range / (4 * n_rows * (v_dim + 2)));
    splits = std::max<std::uint64_t>(splits, 1);
  }
  const std::uint32_t keys_per_split = u32(ceil_div(ceil_div(n_keys, splits), step) * step);  // whole steps
  splits = ceil_div(n_keys, keys_per_split);  // after rounding up, no split may be left empty
  const std::uint64_t ml_offset = splits * n_rows * v_dim;
  std::shared_ptr<TensorImpl> dst = splits > 1 ? scratch(ml_offset + splits * n_rows * 2) : out;

  const AttnMeta meta = attn_meta(params, p, sinks);
  Dispatch d;
  d.op = "attention";
  d.key = {KernelId::attn_fused_coalesced,
           spec({{VKATTN_SPEC_WG_SIZE, wg},
                 {VKATTN_SPEC_COALESCED_ROWS, rows},
                 {VKATTN_SPEC_COALESCED_LANES, lanes},
                 {VKATTN_SPEC_COALESCED_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                 {VKATTN_SPEC_COALESCED_K_TYPE, keys.type},
                 {VKATTN_SPEC_COALESCED_V_TYPE, values.type},
                 {VKATTN_SPEC_COALESCED_K_EPL, kp.epl},
                 {VKATTN_SPEC_COALESCED_K_PIECES, kp.pieces},
                 {VKATTN_SPEC_COALESCED_V_EPL, vp.epl},
                 {VKATTN_SPEC_COALESCED_V_PIECES, vp.pieces},
                 {VKATTN_SPEC_COALESCED_K_ALIGNED, head_dim % kp.epl == 0 ? 1u : 0u},
                 {VKATTN_SPEC_COALESCED_V_ALIGNED, rows_aligned(values, vp.epl) ? 1u : 0u},
                 {VKATTN_SPEC_COALESCED_BATCH, batch},
                 {VKATTN_SPEC_COALESCED_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                 {VKATTN_SPEC_COALESCED_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                 {VKATTN_SPEC_COALESCED_D4, d4},
                 {VKATTN_SPEC_COALESCED_EARLY, tune.early == 2 ? 1u : tune.early},
                 {VKATTN_SPEC_COALESCED_HEADS_FIRST, tune.heads_first}})};
  d.key.subgroup_size = sg;
  return finish_fused(ctx, params, std::move(d), std::move(q), keys, values, std::move(dst), std::move(out), std::move(mask), p,
                      sinks, meta, false, {rows, row_tiles, u32(splits), keys_per_split, ml_offset}, base_groups);
}

}  // namespace vkattn::detail
