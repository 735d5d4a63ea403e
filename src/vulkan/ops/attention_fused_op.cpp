// Host side of CommandList::attention: the fused kernel (attn_fused.comp) with tile rows,
// workgroup shape and key splits chosen within the device's limits, or the three stages
// through a temporary (AttentionPath).
#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <optional>

#include "common/shape_math.hpp"
#include "vulkan/device.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

// Keys per invocation when scoring: each query value read serves this many keys (the
// scores kernel's register blocking). Tiles of up to 4 rows (decode) take 8, larger ones
// 4, so that rows x keys dot products stay at 32 registers.
std::uint32_t keys_per_lane(std::uint32_t rows) { return rows <= 4 ? 8 : 4; }

// Shared memory of attn_fused.comp for |rows| rows, workgroup |wg|, |d4| vec4s of query per
// row (0 when the queries are read directly: the tile is then one vec4).
std::uint64_t shared_bytes(std::uint32_t rows, std::uint32_t wg, std::uint32_t d4) {
  return std::max<std::uint64_t>(1, std::uint64_t{rows} * d4) * 16 + std::uint64_t{rows} * wg * 4 +
         std::uint64_t{wg} * keys_per_lane(rows) * ((rows + 3) / 4) * 16 + std::uint64_t{wg} * (32 + 4);
}

// The three stages through one temporary (the softmax works in place), timed and named as
// one "attention" op.
Dispatches three_stages(const Context& ctx, ParamArena& params, const ScratchFn& scratch, const TempFn& temp,
                        std::shared_ptr<TensorImpl> q, KeySource keys, KeySource values, std::shared_ptr<TensorImpl> out,
                        std::shared_ptr<TensorImpl> mask, const ScoresParams& p, const std::vector<float>& sinks) {
  std::shared_ptr<TensorImpl> scores = temp(TempShape{q->shape[0], q->shape[1], keys.n_keys});
  // Over a cache, the temporary's rows matter only up to each sequence's occupancy bound:
  // the stages stop there, where the device lets the softmax and the weighted sum bind the
  // slot table as a fifth storage buffer.
  StopAtBound bound{keys.slots, keys.bound, &p.q_seq};
  const StopAtBound* stop = keys.meta_stride != 0 && ctx.limits.max_storage_buffers >= 5 ? &bound : nullptr;
  Dispatches ds;
  ds.push_back(attn_scores_dispatch(ctx, params, std::move(q), std::move(keys), scores, std::move(mask), p, stop));
  ds.push_back(attn_softmax_dispatch(ctx, params, scores, scores, sinks, stop));
  for (Dispatch& d : attn_weighted_sum_dispatches(ctx, params, scratch, scores, std::move(values), std::move(out), p.q_seq, stop))
    ds.push_back(std::move(d));
  for (Dispatch& d : ds) d.op = "attention";
  return ds;
}

// The push constants of |d| as a |T|.
template <class T>
T push_of(const Dispatch& d) {
  T pc{};
  std::memcpy(&pc, d.push.data(), std::min(sizeof(pc), d.push.size()));
  return pc;
}

// The kernels an attention op's dispatches run, for CommandStats: every path below starts
// with its main kernel, whose push constants hold the key splits.
AttentionRun describe(const Dispatches& ds) {
  AttentionRun run;
  // attn_mask_keys comes first where the kernel reads lists (its modes 0 and 1), or mask
  // rows it makes of a key list (mode 2).
  const bool lists = ds[0].key.kernel == KernelId::attn_mask_keys;
  const Dispatch& first = ds[lists ? 1 : 0];
  run.sparse = lists && ds[0].key.spec[VKATTN_SPEC_MASK_KEYS_MODE] != 2;
  switch (first.key.kernel) {
    case KernelId::attn_scores:
    case KernelId::attn_scores_texel:
    case KernelId::attn_scores_texel_shuffle:
      run.kernel = AttentionKernel::three_stages;
      for (const Dispatch& d : ds) {
        if (d.key.kernel == KernelId::attn_weighted_sum_reduce) run.splits = push_of<shader::AttnWsumReduceParams>(d).splits;
      }
      return run;
    case KernelId::attn_fused:
    case KernelId::attn_fused_texel:
    case KernelId::attn_fused_subgroup:
    case KernelId::attn_fused_subgroup_texel: run.kernel = AttentionKernel::lane_per_key; break;
    case KernelId::attn_decode:
    case KernelId::attn_decode_shared:
    case KernelId::attn_decode_last:
    case KernelId::attn_decode_shared_last: run.kernel = AttentionKernel::decode; break;
    case KernelId::attn_decode_group: run.kernel = AttentionKernel::group; break;
    case KernelId::attn_decode_group_f16:
      run.kernel = AttentionKernel::group;
      run.precision = AttentionPrecision::f16_products;
      break;
    case KernelId::attn_tiled:
    case KernelId::attn_tiled_shared: run.kernel = AttentionKernel::tiled; break;
    case KernelId::attn_tiled_f16:
    case KernelId::attn_tiled_shared_f16:
      run.kernel = AttentionKernel::tiled;
      run.precision = AttentionPrecision::f16_products;
      break;
    case KernelId::attn_mt_standin:
      run.kernel = AttentionKernel::matrix_standin;
      run.precision = AttentionPrecision::f16_products;
      break;
#ifdef VKATTN_HAVE_COOPMAT_SHADERS
    case KernelId::attn_mt:
    case KernelId::attn_mt_cm8:
      run.kernel = AttentionKernel::matrix;
      run.precision = AttentionPrecision::f16_products;
      break;
#endif
#ifdef VKATTN_HAVE_COOPMAT2_SHADERS
    case KernelId::attn_mt2:
      run.kernel = AttentionKernel::matrix;
      run.precision = AttentionPrecision::f16_products;
      break;
#endif
    default: assert(!"an attention path whose first kernel describe() does not know"); break;
  }
  run.splits = push_of<shader::AttnParams>(first).key_splits;
  return run;
}

// The lane-per-key kernel's shape: each invocation owns 16 bytes of a v row, and key
// groups of such invocations fill about 64 invocations; queries are staged in shared
// memory unless read directly through texel views.
struct LanePerKeyShape {
  bool texel = false;  // q, k and v through texel views
  VRowGroups v_row;
  std::uint32_t wg = 0, d4 = 0;
  bool q_tile = false;
  bool row_fits = false;  // one row's tile fits shared memory
};

LanePerKeyShape lane_per_key_shape(const Context& ctx, const TensorImpl& q, const KeySource& keys, const KeySource& values,
                                   bool rope_on_read) {
  LanePerKeyShape s;
  s.texel = has_texel_view(q) && has_texel_view(*keys.tensor) && has_texel_view(*values.tensor);
  s.d4 = (u32(q.shape[2]) + 3) / 4;
  s.v_row = v_row_groups(ctx, values.head_dim, values.wide(), 64);
  s.wg = s.v_row.lanes * s.v_row.groups;
  s.q_tile = !s.texel || rope_on_read;
  s.row_fits = shared_bytes(1, s.wg, s.q_tile ? s.d4 : 0) <= ctx.limits.max_shared_memory;
  return s;
}

// The lane-per-key kernel (attn_fused.comp) in shape |s|: as many rows a tile as shared
// memory allows, the keys split to fill the device.
Dispatches lane_per_key_dispatches(OpEnv& env, const AttentionCall& call, std::shared_ptr<TensorImpl> q, KeySource keys,
                                   KeySource values, std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                                   const LanePerKeyShape& s) {
  const Context& ctx = env.ctx;
  ParamArena& params = env.params;
  const ScratchFn& scratch = env.scratch;
  const ScoresParams& p = call.params;
  const std::vector<float>& sinks = call.sinks;
  const bool texel = s.texel, q_tile = s.q_tile, row_fits = s.row_fits;
  const VRowGroups& v_row = s.v_row;
  const std::uint32_t wg = s.wg, d4 = s.d4, key_groups = v_row.groups, head_dim = u32(q->shape[2]), v_dim = values.head_dim;
  static_assert(sizeof(shader::AttnParams) == 128);  // the push-constant minimum
  const std::uint32_t n_tokens = u32(q->shape[0]), n_heads = u32(q->shape[1]);
  const std::uint32_t n_keys = keys.n_keys, n_kv_heads = keys.n_kv_heads;
  const std::uint32_t group = n_heads / n_kv_heads;
  const bool k_f16 = keys.wide(), v_f16 = values.wide();  // 8 elements per 16 bytes or fewer
  std::uint32_t rows_cap = kMaxRows;
  while (rows_cap > 1 && shared_bytes(rows_cap, wg, q_tile ? d4 : 0) > ctx.limits.max_shared_memory) --rows_cap;
  if (!row_fits) {
    throw Error(ErrorCode::unsupported,
                "attention over rows of " + std::to_string(head_dim) + " needs more shared memory than " +
                    "maxComputeSharedMemorySize = " + std::to_string(ctx.limits.max_shared_memory) +
                    ", and its scores would pass maxStorageBufferRange",
                "maxComputeSharedMemorySize", 0, "attention");
  }
  const std::uint32_t rows = tile_rows(rows_cap, n_tokens, group, keys.meta_stride != 0, p.q_seq);
  const std::uint32_t keys_per_invocation = keys_per_lane(rows);
  const std::uint32_t row_tiles = u32(ceil_div(std::uint64_t{n_tokens} * group, rows));

  const std::uint64_t n_rows = std::uint64_t{n_tokens} * n_heads;
  const std::uint64_t base_groups = std::uint64_t{n_kv_heads} * row_tiles;
  // Each split's partial results: its sums and its (max, sum) pairs.
  std::uint64_t splits = key_splits(base_groups, n_keys, n_rows * (v_dim + 2), ctx.limits);
  const std::uint32_t block = wg * keys_per_invocation;
  std::uint32_t keys_per_split = u32(ceil_div(ceil_div(n_keys, splits), block) * block);  // whole blocks
  // A split's blocks stay under llvmpipe's loop limit: the passes of a block, counted
  // generously (its dims, with rope on read each key's rotary pairs; each row and key's
  // visibility, score and probability; the block maxima over the lanes; a key group's V
  // sums, 4 keys a pass), bound the blocks of a split. (With 256 row workgroups and no
  // split, 300k keys once came back as zeros.)
  const std::uint64_t block_passes = 16 + head_dim + (p.rope_on_read ? std::uint64_t{head_dim} * keys_per_invocation : 0) +
                                     3 * std::uint64_t{rows} * keys_per_invocation + std::uint64_t{rows} * wg +
                                     ceil_div(block, 4 * std::max(key_groups, 1u)) * (4 + ceil_div(rows, 4u));
  if (const std::uint64_t steps = cpu_steps_per_split(ctx, block_passes)) {
    keys_per_split = u32(std::min<std::uint64_t>(keys_per_split, steps * block));
  }
  splits = ceil_div(n_keys, keys_per_split);  // after rounding up, no split may be left empty
  // The splits' value rows, then a (max, sum) pair each.
  const std::uint64_t ml_offset = splits * n_rows * v_dim, partial_words = ml_offset + splits * n_rows * 2;
  if (const std::uint64_t bytes = 4 * partial_words; splits > 1 && bytes > ctx.limits.max_storage_buffer_range) {
    // Only where llvmpipe's loop limit splits the keys (key_splits keeps a GPU's splits
    // within the range): the grid, sized for a cache's capacity, sets their number.
    const std::uint64_t most = ctx.limits.max_storage_buffer_range / (4 * splits * n_heads * (v_dim + 2));
    throw Error(ErrorCode::out_of_memory,
                "on a CPU device (llvmpipe's loop limit) attention over " + std::to_string(n_keys) + " keys splits them " +
                    std::to_string(splits) + " ways, and the splits' partial results for " + std::to_string(n_tokens) +
                    " query tokens need " + std::to_string(bytes) +
                    " bytes, over maxStorageBufferRange = " + std::to_string(ctx.limits.max_storage_buffer_range) +
                    (most > 0 ? ": record at most about " + std::to_string(most) +
                                    " query tokens per attention over these keys (or use a cache of smaller capacity)"
                              : ": not even one query token fits; use a cache of smaller capacity"),
                "maxStorageBufferRange", 0, "attention");
  }
  std::shared_ptr<TensorImpl> dst = splits > 1 ? scratch(partial_words) : out;

  const AttnMeta meta = attn_meta(params, p, sinks);

  const bool subgroups = ctx.limits.subgroup_arithmetic && ctx.limits.subgroup_size > 0;
  const KernelId kernel = subgroups ? (texel ? KernelId::attn_fused_subgroup_texel : KernelId::attn_fused_subgroup)
                                    : (texel ? KernelId::attn_fused_texel : KernelId::attn_fused);
  Dispatch d;
  d.op = "attention";
  d.key = {kernel, spec({{VKATTN_SPEC_WG_SIZE, wg},
                         {VKATTN_SPEC_FUSED_ROWS, rows},
                         {VKATTN_SPEC_FUSED_Q_VEC4, q_tile ? rows * d4 : 1u},
                         {VKATTN_SPEC_FUSED_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                         {VKATTN_SPEC_FUSED_K_TYPE, keys.type},
                         {VKATTN_SPEC_FUSED_V_TYPE, values.type},
                         {VKATTN_SPEC_FUSED_K_VEC, head_dim % (k_f16 ? 8 : 4) == 0 ? 1u : 0u},
                         {VKATTN_SPEC_FUSED_V_VEC, rows_aligned(values, v_row.per_lane) ? 1u : 0u},
                         {VKATTN_SPEC_FUSED_KEY_GROUPS, key_groups},
                         {VKATTN_SPEC_FUSED_KEYS, keys_per_invocation},
                         {VKATTN_SPEC_FUSED_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                         {VKATTN_SPEC_FUSED_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                         {VKATTN_SPEC_FUSED_V_EIGHT, v_row.per_lane == 8 && !v_f16 ? 1u : 0u}})};
  return finish_fused(ctx, params, std::move(d), std::move(q), keys, values, std::move(dst), std::move(out), std::move(mask), p,
                      sinks, meta, texel, {rows, row_tiles, u32(splits), keys_per_split, ml_offset}, base_groups);
}

// The kernels for |call| over |mask| (the call's, or the mask rows of its key list).
Dispatches choose(OpEnv& env, const AttentionCall& call, std::shared_ptr<TensorImpl> mask) {
  const Context& ctx = env.ctx;
  ParamArena& params = env.params;
  const ScratchFn& scratch = env.scratch;
  std::shared_ptr<TensorImpl> q = call.q, out = call.out;
  KeySource keys = key_source(call.kv, false), values = key_source(call.kv, true);
  const ScoresParams& p = call.params;
  const std::vector<float>& sinks = call.sinks;
  const AttentionPath path = call.path;
  // On CPU devices every shared-memory access and subgroup reduction of the fused kernel
  // is a loop over lanes, and the three stages run 2.5 to 5 times faster
  // (docs/benchmarks.md); they need the scores to fit a buffer (else the temporary throws).
  const std::uint64_t score_bytes = std::uint64_t{4} * q->shape[0] * q->shape[1] * keys.n_keys;
  const bool scores_fit = score_bytes <= ctx.limits.max_storage_buffer_range;
  const LanePerKeyShape lane = lane_per_key_shape(ctx, *q, keys, values, p.rope_on_read);
  // out, mask, meta and the key positions, and q, k, v unless read through texel views
  // (finish_fused's bindings): on a device that allows a kernel fewer storage buffers, the
  // three stages (4 at most without a mask).
  const bool fused_fits = 4u + (lane.texel ? 0u : 3u) <= ctx.limits.max_storage_buffers;
  // Few rows on the GPU shape (decode): the decode kernels, where the device allows them
  // their bindings; else the lane-per-key kernel below, or the three stages.
  const bool few_rows =
      ctx.shape == KernelShape::gpu && decode_preferred(ctx, u32(q->shape[0]), u32(q->shape[1]), keys.n_kv_heads);
  // VKATTN_DECODE=kernel=group takes many rows too (a probe of the group kernel on prefill).
  const bool decode = (few_rows || (ctx.shape == KernelShape::gpu && ctx.decode.kernel == DecodeTuning::Kernel::group)) &&
                      decode_attention_usable(ctx);
  // f16 products: the matrix kernel where it runs (any kernel may be more precise than asked).
  if (call.precision == AttentionPrecision::f16_products && path != AttentionPath::three_stages) {
    if (std::optional<Dispatches> ds = matrix_attention_dispatches(ctx, params, scratch, q, keys, values, out, mask, p, sinks)) {
      return std::move(*ds);
    }
  }
  if (path == AttentionPath::three_stages || (!fused_fits && scores_fit && !decode) ||
      (path == AttentionPath::automatic && ctx.shape == KernelShape::cpu && scores_fit) ||
      (!lane.row_fits && scores_fit && !decode)) {
    return three_stages(ctx, params, scratch, env.temp, std::move(q), std::move(keys), std::move(values), std::move(out),
                        std::move(mask), p, sinks);
  }
  // Many rows per KV head on the GPU shape (prefill), or anything under
  // VKATTN_PREFILL=kernel=tiled: the tiled kernel, where it fits.
  if ((!few_rows && !decode) || ctx.prefill.kernel == PrefillTuning::Kernel::tiled) {
    if (std::optional<Dispatches> ds =
            tiled_attention_dispatches(ctx, params, scratch, q, keys, values, out, mask, p, sinks, call.precision)) {
      return std::move(*ds);
    }
  }
  if (decode) {
    return decode_attention_dispatches(ctx, params, scratch, std::move(q), std::move(keys), std::move(values), std::move(out),
                                       std::move(mask), p, sinks, call.precision);
  }
  // The lane-per-key kernel; where not even one row's tile fits shared memory and the
  // stages could not take it, a clear refusal.
  return lane_per_key_dispatches(env, call, std::move(q), std::move(keys), std::move(values), std::move(out), std::move(mask),
                                 lane);
}

// A key list's mask rows [n_tokens, n_keys] (attn_mask_keys.comp, mode 2), for the kernels
// that read every key, into the list's temporary |rows|.
Dispatch key_list_rows(const Context& ctx, const std::shared_ptr<TensorImpl>& list, const std::shared_ptr<TensorImpl>& rows) {
  const std::uint32_t n_tokens = u32(rows->shape[0]), n_keys = u32(rows->shape[1]), wg = workgroup_size(ctx, 128);
  Dispatch d;
  d.op = "attention";  // timings add up under the op's name
  d.key = {KernelId::attn_mask_keys, spec({{VKATTN_SPEC_WG_SIZE, wg}, {VKATTN_SPEC_MASK_KEYS_MODE, 2u}})};
  d.bindings = {read_binding(list), write_binding(rows)};
  d.set_push(
      shader::AttnMaskKeysParams{.n_tokens = n_tokens, .n_keys = n_keys, .max_keys = u32(list->shape[1]), .list_offset = 0u});
  d.groups = std::uint64_t{n_tokens} * ceil_div(n_keys, std::uint64_t{wg} * 32);  // the shader's CHUNK
  return d;
}

// A sparse mask (a key list, or mask_keys's promise): the group kernel reading only the
// listed keys where it takes the call, at any number of rows. Else a key list becomes mask
// rows first, and the kernels read every key.
Dispatches choose_sparse(OpEnv& env, const AttentionCall& call) {
  const Context& ctx = env.ctx;
  const std::uint32_t room = call.key_list ? u32(call.mask->shape[1]) : call.mask_keys;
  if (room != 0 && call.path != AttentionPath::three_stages) {
    if (std::optional<Dispatches> ds =
            listed_group_dispatches(ctx, env.params, env.scratch, call.q, key_source(call.kv, false), key_source(call.kv, true),
                                    call.out, call.mask, call.params, call.sinks, call.precision, {room, call.key_list})) {
      return std::move(*ds);
    }
  }
  if (!call.key_list) return choose(env, call, call.mask);
  const std::uint64_t n_tokens = call.q->shape[0], n_keys = key_source(call.kv, false).n_keys;
  if (n_tokens * n_keys * 4 > ctx.limits.max_storage_buffer_range) {
    throw Error(ErrorCode::unsupported,
                "a key list over " + std::to_string(n_keys) + " keys for " + std::to_string(n_tokens) +
                    " tokens takes mask rows of " + std::to_string(n_tokens * n_keys * 4) +
                    " bytes on kernels that read every key, past maxStorageBufferRange = " +
                    std::to_string(ctx.limits.max_storage_buffer_range) + ": attend in smaller chunks",
                "maxStorageBufferRange", 0, "attention");
  }
  std::shared_ptr<TensorImpl> rows = env.temp(TempShape{n_tokens, n_keys});
  Dispatches ds;
  ds.push_back(key_list_rows(ctx, call.mask, rows));
  for (Dispatch& d : choose(env, call, rows)) ds.push_back(std::move(d));
  return ds;
}

}  // namespace

Dispatches build(OpEnv& env, const AttentionCall& call) {
  Dispatches ds = choose_sparse(env, call);
  ds[0].attention = describe(ds);
  return ds;
}

Dispatches finish_fused(const Context& ctx, ParamArena& params, Dispatch d, std::shared_ptr<TensorImpl> q, const KeySource& keys,
                        const KeySource& values, std::shared_ptr<TensorImpl> dst, std::shared_ptr<TensorImpl> out,
                        std::shared_ptr<TensorImpl> mask, const ScoresParams& p, const std::vector<float>& sinks,
                        const AttnMeta& meta, bool texel, const AttnPlan& plan, std::uint64_t base_groups) {
  const bool has_mask = mask != nullptr;
  Binding mask_binding = has_mask ? read_binding(std::move(mask)) : params.add_zero();
  const Binding key_pos = key_positions(params, keys, p);
  d.key.spec = paged(std::move(d.key.spec), keys);
  d.set_push(attn_params(q->shape, keys, values, p, meta, has_mask, !sinks.empty(), plan));
  // Packed (clang-format would put one item per line).
  // clang-format off
  d.bindings = {read_binding(std::move(q), texel), read_binding(keys.tensor, texel),
                read_binding(values.tensor, texel), write_binding(dst), std::move(mask_binding),
                meta.binding, key_pos};
  // clang-format on
  d.groups = base_groups * plan.splits;
  Dispatches ds;
  ds.push_back(std::move(d));
  if (plan.splits > 1) {
    ds.push_back(fused_combine_dispatch(ctx, params, dst, std::move(out), sinks, plan.splits, plan.ml_offset));
  }
  return ds;
}

shader::AttnParams attn_params(const Shape& q_shape, const KeySource& keys, const KeySource& values, const ScoresParams& p,
                               const AttnMeta& meta, bool has_mask, bool has_sinks, const AttnPlan& plan) {
  const std::uint32_t n_heads = u32(q_shape[1]);
  shader::AttnParams pc{};
  pc.n_tokens = u32(q_shape[0]);
  pc.n_heads = n_heads;
  pc.n_keys = keys.n_keys;
  pc.head_dim = u32(q_shape[2]);
  pc.group = n_heads / keys.n_kv_heads;
  pc.rows_per_wg = plan.rows;
  pc.row_tiles = plan.row_tiles;
  pc.key_splits = plan.splits;
  pc.keys_per_split = plan.keys_per_split;
  pc.has_sinks = has_sinks ? 1u : 0u;
  pc.ml_offset = u32(plan.ml_offset);
  pc.v_scales = values.scales;
  pc.counter_offset = plan.counter_offset;
  pc.v_head_dim = values.head_dim;
  pc.v_key_stride = values.key_stride;
  pc.v_head_stride = values.head_stride;
  pc.v_seq_stride = values.seq_stride;
  set_score_fields(pc, keys, p, meta, has_mask);
  return pc;
}

Dispatch fused_combine_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> partial,
                                std::shared_ptr<TensorImpl> out, const std::vector<float>& sinks, std::uint32_t splits,
                                std::uint64_t ml_offset) {
  static_assert(sizeof(shader::AttnFusedCombineParams) == 24);
  const std::uint32_t n_rows = u32(out->shape[0] * out->shape[1]), n_heads = u32(out->shape[1]);
  const std::uint32_t head_dim = u32(out->shape[2]);
  Dispatch c;
  c.op = "attention";  // its second pass: timings add up under the op's name
  const std::uint32_t cwg = workgroup_size(ctx, 64);
  const bool texel_partial = has_texel_view(*partial);
  c.key = {texel_partial ? KernelId::attn_fused_combine_texel : KernelId::attn_fused_combine, spec({{VKATTN_SPEC_WG_SIZE, cwg}})};
  c.bindings = {read_binding(std::move(partial), texel_partial), write_binding(std::move(out)),
                params.add(std::span<const float>(sinks))};
  c.set_push(shader::AttnFusedCombineParams{.n_rows = n_rows,
                                            .n_heads = n_heads,
                                            .head_dim = head_dim,
                                            .splits = splits,
                                            .has_sinks = sinks.empty() ? 0u : 1u,
                                            .ml_offset = u32(ml_offset)});
  c.groups = ceil_div(std::uint64_t{n_rows} * head_dim, cwg);
  return c;
}

}  // namespace vkattn::detail
