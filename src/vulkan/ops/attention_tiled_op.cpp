// Host side of attn_tiled.comp, the tiled kernel for fused attention with many query rows
// per KV head (prefill): the tile shape from the device's shared memory and the row count,
// shuffles or shared memory for a row's maximum and sum, the split count as the decode
// kernels', and $VKATTN_PREFILL. docs/kernel-shapes.md describes the kernel.
#include <algorithm>
#include <bit>
#include <string>

#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

// Query rows and keys per tile, and each invocation's block of them (rows x keys of
// scores; rows x (vec4s of V / (keys / keys per invocation)) of the output).
struct TileShape {
  std::uint32_t rows, keys, rows_per_invocation, keys_per_invocation;
  std::uint32_t row_group() const { return keys / keys_per_invocation; }  // invocations sharing rows
  std::uint32_t invocations() const { return rows / rows_per_invocation * row_group(); }
};
// In order of preference; the first that fits the device's shared memory (at most
// kMaxTileBytes, so that an NVIDIA SM or an AMD CU holds several workgroups) is taken.
// Measured on an H200 at head_dim 128 (docs/gpu.md): 64 x 8 of 2 x 1 fastest, then 32 x 16
// of 2 x 1; more keys per invocation (2 x 2, 2 x 4, 1 x 2) slower. In 48 KiB 64 x 8 fits
// heads up to 128, 32 x 16 up to 160 and 32 x 8 up to 192 (in lavapipe's 32 KiB, 144); the
// spec minimum's 16 KiB takes 8 x 8 at 128 and 4 x 4 at 256.
constexpr TileShape kShapes[] = {{64, 8, 2, 1}, {32, 16, 2, 1}, {32, 8, 2, 1}, {16, 16, 1, 2},
                                 {16, 8, 1, 1}, {8, 8, 1, 1},   {8, 4, 1, 1},  {4, 4, 1, 1}};
// What $VKATTN_PREFILL's tile knobs change when not all of them are given.
constexpr TileShape kTunedBase = {32, 16, 2, 2};
constexpr std::uint64_t kMaxTileBytes = 48 * 1024;
// Left to choose, the tiled kernel takes only tiles of this many rows or more (fewer rows
// share too little of each K/V element for the staging to pay) and at most this many
// output floats per invocation (more spill on GPUs of 64 registers per invocation).
constexpr std::uint32_t kAutoRows = 16;
constexpr std::uint32_t kMaxAccumulators = 64;
constexpr std::uint32_t kMaxPrefetch = 8;  // vec4s of K (and of V) per invocation held across a tile

struct TiledPlan {
  TileShape shape{};
  std::uint32_t rows = 0;  // real rows per tile; 0 where the kernel is not taken
  std::uint32_t sg = 0;    // the subgroup size asked for (0: shared memory)
  bool v_from_k = false;
  bool refused = false;  // the tile $VKATTN_PREFILL asks for does not fit the device
};

// attn_tiled.comp's shared memory: queries, K and V rows at odd strides of vec4s, the
// probabilities, two tiles' key positions and sequences, the rows' positions and
// sequences, and without shuffles each row group's shares.
std::uint64_t tile_bytes(const TileShape& s, std::uint32_t dk4, std::uint32_t dv4, bool v_from_k, bool shuffles) {
  const std::uint64_t stride = dk4 | 1u, rows = s.rows, keys = s.keys;
  return (rows * stride + keys * stride + (v_from_k ? 1 : keys * dv4)) * 16 + rows * (keys | 1u) * 4 + 4 * keys * 4 +
         2 * rows * 4 + (shuffles ? 0 : rows * s.row_group() * 4);
}

TiledPlan plan_tiled(const Context& ctx, const KeySource& keys, const KeySource& values, std::uint32_t n_tokens,
                     std::uint32_t group, const ScoresParams& p, bool forced) {
  const PrefillTuning& tune = ctx.prefill;
  const std::uint32_t dk4 = (keys.head_dim + 3) / 4, dv4 = (values.head_dim + 3) / 4;
  const bool per_seq = keys.meta_stride != 0;
  TiledPlan plan;
  plan.v_from_k = values_in_keys(keys, values) && !p.rope_on_read;  // rotated K rows cannot serve as V
  // Forced onto few rows (decode), a tile at most half empty.
  const std::uint32_t most_rows = std::max(4u, std::bit_ceil(tile_rows(64, n_tokens, group, per_seq, p.q_seq)));
  // A tile asked for by $VKATTN_PREFILL may take all the shared memory the device has.
  const bool tuned = tune.tiled_tuned();
  const std::uint64_t budget = tile_budget(ctx.limits.max_shared_memory, tuned, kMaxTileBytes);
  TileShape one = kTunedBase;
  if (tuned) {
    if (tune.rows) one.rows = tune.rows;
    if (tune.keys) one.keys = tune.keys;
    if (tune.rows_per_invocation) one.rows_per_invocation = tune.rows_per_invocation;
    if (tune.keys_per_invocation) one.keys_per_invocation = tune.keys_per_invocation;
    one.rows_per_invocation = std::min(one.rows_per_invocation, one.rows);
    one.keys_per_invocation = std::min(one.keys_per_invocation, one.keys);
  }
  const std::span<const TileShape> shapes = tuned ? std::span<const TileShape>(&one, 1) : std::span<const TileShape>(kShapes);
  for (const TileShape& s : shapes) {
    if (!tuned && forced && s.rows > most_rows) continue;
    const std::uint32_t rows = tile_rows(s.rows, n_tokens, group, per_seq, p.q_seq);
    if (!forced && rows < std::max(s.rows, kAutoRows)) continue;
    const std::uint32_t kg = s.row_group(), wg = s.invocations();
    plan.refused = tuned;  // until it fits
    if (wg > ctx.limits.max_workgroup_invocations) continue;
    if (!forced && !tuned && s.rows_per_invocation * ceil_div(dv4, kg) * 4 > kMaxAccumulators) continue;
    const std::uint32_t sg = preferred_subgroup_size(ctx.limits);
    const bool shuffles = tune.reduce != PrefillTuning::Reduce::shared && subgroups_fit(ctx.limits) && kg <= sg && wg % sg == 0;
    if (tune.reduce == PrefillTuning::Reduce::subgroup && !shuffles) continue;
    if (tile_bytes(s, dk4, dv4, plan.v_from_k, shuffles) > budget) continue;
    plan.shape = s;
    plan.refused = false;
    plan.rows = rows;
    plan.sg = shuffles ? sg : 0;
    return plan;
  }
  return plan;
}

}  // namespace

bool packed_f16(const Context& ctx, AttentionPrecision precision) {
  return precision == AttentionPrecision::f16_products && ctx.physical.float16 && ctx.limits.shader_float16;
}

std::optional<Dispatches> tiled_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                     std::shared_ptr<TensorImpl> q, const KeySource& keys,
                                                     const KeySource& values, std::shared_ptr<TensorImpl> out,
                                                     std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                                     const std::vector<float>& sinks, AttentionPrecision precision) {
  const bool forced = ctx.prefill.kernel == PrefillTuning::Kernel::tiled;
  if (ctx.prefill.kernel == PrefillTuning::Kernel::lane_per_key || ctx.limits.max_storage_buffers < 8 ||
      (!forced && ctx.shape != KernelShape::gpu)) {
    return std::nullopt;
  }
  const std::uint32_t n_tokens = u32(q->shape[0]), n_heads = u32(q->shape[1]), head_dim = u32(q->shape[2]);
  const std::uint32_t n_kv_heads = keys.n_kv_heads, group = n_heads / n_kv_heads;
  const TiledPlan t = plan_tiled(ctx, keys, values, n_tokens, group, p, forced);
  if (!t.rows) {
    // A tile asked for is refused, not left for another kernel (a probe would time that).
    if (!forced && !t.refused) return std::nullopt;
    throw Error(ErrorCode::unsupported,
                "VKATTN_PREFILL: no tile of the tiled kernel over rows of " + std::to_string(head_dim) + " and " +
                    std::to_string(values.head_dim) +
                    " fits maxComputeSharedMemorySize = " + std::to_string(ctx.limits.max_shared_memory) +
                    " and maxComputeWorkGroupInvocations = " + std::to_string(ctx.limits.max_workgroup_invocations) + " as asked",
                "VKATTN_PREFILL", 0, "attention");
  }
  const std::uint32_t v4 = (values.head_dim + 3) / 4;
  const std::uint32_t wg = t.shape.invocations(), dk4 = (head_dim + 3) / 4;
  RowTiles rt = row_tiles(ctx, *q, keys, values, t.rows, t.shape.keys);
  const bool f16 = packed_f16(ctx, precision);
  // The iterations of one tile (the tile loop's own, its loops over dims, keys (and their
  // chains), rows and staged vec4s) against llvmpipe's loop limit.
  const TileShape& s = t.shape;
  const std::uint64_t inner = 1 + dk4 + s.keys + std::uint64_t{t.rows} * ceil_div(s.keys, wg) +
                              ceil_div(std::uint64_t{s.keys} * dk4, wg) + ceil_div(std::uint64_t{s.keys} * v4, wg) + 2 +
                              (f16 ? ceil_div(dk4, 4) + 4 + ceil_div(s.keys, 8) : 0);  // chains, as if not unrolled
  if (const std::uint64_t steps = cpu_steps_per_split(ctx, inner)) {
    const std::uint64_t most = most_splits(t.rows);
    const std::uint64_t needed = ceil_div(ceil_div(keys.n_keys, s.keys), steps);
    if (needed > most) {
      throw Error(ErrorCode::unsupported,
                  "VKATTN_PREFILL=kernel=tiled: on a CPU device (llvmpipe's loop limit) the tiled kernel takes at most " +
                      std::to_string(most * steps * s.keys) + " keys at these widths, not " + std::to_string(keys.n_keys),
                  "VKATTN_PREFILL", 0, "attention");
    }
    rt.splits = std::max(rt.splits, needed);
    // Those splits' partials, for a grid sized to the cache's capacity, may not fit one
    // buffer range; the lane-per-key kernel then runs it (it bounds its own, or says how
    // many query tokens fit).
    const std::uint64_t bytes = 4 * scratch_layout(rt, *q, values, 0).lists;  // no lists: the partials alone
    if (rt.splits > 1 && bytes > ctx.limits.max_storage_buffer_range) {
      if (!forced) return std::nullopt;
      throw Error(ErrorCode::unsupported,
                  "VKATTN_PREFILL=kernel=tiled: on a CPU device (llvmpipe's loop limit) the tiled kernel splits " +
                      std::to_string(keys.n_keys) + " keys " + std::to_string(rt.splits) + " ways, and their partials for " +
                      std::to_string(n_tokens) + " query tokens need " + std::to_string(bytes) +
                      " bytes, over maxStorageBufferRange = " + std::to_string(ctx.limits.max_storage_buffer_range),
                  "VKATTN_PREFILL", 0, "attention");
    }
  }
  // The next tile's K and V loads in flight while a tile computes: each invocation holds
  // its share of both tiles' rows as loaded, at most 8 x 16 bytes of each (more would cost
  // occupancy on GPUs, and unrolling them lavapipe's compile time).
  const bool prefetch =
      ctx.prefill.prefetch && ceil_div(t.shape.keys * dk4, wg) <= kMaxPrefetch && ceil_div(t.shape.keys * v4, wg) <= kMaxPrefetch;
  Dispatch d;
  d.key = {t.sg ? (f16 ? KernelId::attn_tiled_f16 : KernelId::attn_tiled)
                : (f16 ? KernelId::attn_tiled_shared_f16 : KernelId::attn_tiled_shared),
           spec({{VKATTN_SPEC_WG_SIZE, wg},
                 {VKATTN_SPEC_TILED_ROWS, t.shape.rows},
                 {VKATTN_SPEC_TILED_KEYS, t.shape.keys},
                 {VKATTN_SPEC_TILED_ROWS_PER_INVOCATION, t.shape.rows_per_invocation},
                 {VKATTN_SPEC_TILED_KEYS_PER_INVOCATION, t.shape.keys_per_invocation},
                 {VKATTN_SPEC_TILED_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                 {VKATTN_SPEC_TILED_K_TYPE, keys.type},
                 {VKATTN_SPEC_TILED_V_TYPE, values.type},
                 {VKATTN_SPEC_TILED_DK4, (head_dim + 3) / 4},
                 {VKATTN_SPEC_TILED_DV4, v4},
                 {VKATTN_SPEC_TILED_Q_ALIGNED, head_dim % 4 == 0 ? 1u : 0u},
                 {VKATTN_SPEC_TILED_K_ALIGNED, rows_aligned(keys, 4) ? 1u : 0u},
                 {VKATTN_SPEC_TILED_V_ALIGNED, rows_aligned(values, 4) ? 1u : 0u},
                 {VKATTN_SPEC_TILED_MULTI_SEQ, keys.meta_stride != 0 && keys.n_seqs > 1 ? 1u : 0u},
                 {VKATTN_SPEC_TILED_V_FROM_K, t.v_from_k ? 1u : 0u},
                 {VKATTN_SPEC_TILED_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                 {VKATTN_SPEC_TILED_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                 {VKATTN_SPEC_TILED_PREFETCH, prefetch ? 1u : 0u}})};
  d.key.subgroup_size = t.sg;
  return finish_row_tiles(ctx, params, scratch, std::move(d), std::move(q), keys, values, std::move(out), std::move(mask), p,
                          sinks, rt);
}

}  // namespace vkattn::detail
