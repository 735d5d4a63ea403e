// Host side of attn_mt.comp, fused attention on the matrix-tile layer (mt.glsl) under
// AttentionPrecision::f16_products: whether it runs (the device's matrix path), its tile
// (subgroups of 16 rows, keys per tile) within the shared memory, and the splits.
// docs/kernel-shapes.md describes the kernel and the layer.
#include <algorithm>
#include <bit>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/encoding.hpp"

namespace vkattn::detail {

namespace {

using MtShape = MatrixTileShape;
// In order of preference, the first that fits min(maxComputeSharedMemorySize, 48 KiB) and
// the workgroup limit is taken, with no row group of repeated rows. Heads up to 128 wide
// (8 chunks) take the row split alone; up to 192 (12) the row split first, but the dim
// split before a single row group (a decode-sized group, absorbed MLA at 192: four
// subgroups share its 16 rows instead of one taking them all); wider heads (256, absorbed
// MLA's 576) the dim split first, whose queries live in registers, not shared memory.
constexpr MtShape kMtRowShapes[] = {{4, 1, 2}, {4, 1, 1}, {2, 1, 2}, {2, 1, 1}};
constexpr MtShape kMtDimShapes[] = {{2, 2, 1}, {1, 4, 1}, {1, 2, 1}};
constexpr MtShape kMtOneRowGroup[] = {{1, 1, 2}, {1, 1, 1}};
constexpr std::uint32_t kMtRowOnlyChunks = 8, kMtRowFirstChunks = 12;
// A dim slice holds at most 9 A tiles of Q and 8 accumulators of O (absorbed MLA's 576 /
// 512 over 4 slices): an estimated 170 registers a lane at 32 lanes (Q 36, O 64, S 8 and
// the rest), within NVIDIA's 255; no GPU has compiled it yet.
constexpr std::uint32_t kMtSliceQChunks = 9, kMtSliceOChunks = 8;
constexpr std::uint64_t kMtMaxBytes = 48 * 1024;
// The cooperative-matrix form of the attention kernel (|selftest|: of the self-test) for
// the device's matrix side: 16x16x16 matrices, or 8x8x8 ones four to a tile. The forms
// exist only where configure built them; without them DeviceLimits::matrix_units is never
// set (choose_matrix), so the stand-in ids are never dispatched in their place.
KernelId units_kernel(const Context& ctx, bool selftest) {
#ifdef VKATTN_HAVE_COOPMAT_SHADERS
  if (ctx.physical.matrix_tile == 8) return selftest ? KernelId::mt_selftest_cm8 : KernelId::attn_mt_cm8;
  return selftest ? KernelId::mt_selftest : KernelId::attn_mt;
#else
  (void)ctx;
  return selftest ? KernelId::mt_selftest_standin : KernelId::attn_mt_standin;
#endif
}

// attn_mt2 (NV cooperative matrices 2): row groups and key chunks in order of preference,
// heads up to 128 wide (a subgroup holds Q as 16 x 128 halves and O as 16 x 128 floats in
// registers: with S, P and the rest about 180 registers a lane at 32 lanes; wider heads
// take attn_mt's dim split). Its shared memory in uints: K and V rows at attn_mt's
// pitches, each subgroup's scores (16 rows of the tile's keys and 4), the marks, and seven
// words a row (position, sequence, token, slope, maximum, sum, factor). At 48 KiB and head
// dim 128 the 64 x 64 tile does not fit; 64 x 32 does.
constexpr MtShape kMt2Shapes[] = {{4, 1, 4, true}, {4, 1, 2, true}, {2, 1, 4, true}, {2, 1, 2, true},
                                  {4, 1, 1, true}, {2, 1, 1, true}, {1, 1, 2, true}, {1, 1, 1, true}};
constexpr std::uint32_t kMt2MaxChunks = 8;
std::uint64_t mt2_bytes(const MtShape& s, std::uint32_t dk_chunks, std::uint32_t dv_chunks, bool v_from_k) {
  const std::uint64_t rows = 16u * s.row_groups, keys = 16u * s.key_chunks;
  const std::uint64_t qp = ((2u * dk_chunks) | 1u) * 4u, vp = ((2u * dv_chunks) | 1u) * 4u;
  return 4 * (4 + keys * qp + (v_from_k ? 4 : keys * vp) + rows * (keys + 4) + 3 * keys * (s.prefetch ? 2 : 1) + 7 * rows);
}

// attn_mt2's kernel id (planned only where the build has it: PhysicalDevice::matrix_nv2).
KernelId units2_kernel() {
#ifdef VKATTN_HAVE_COOPMAT2_SHADERS
  return KernelId::attn_mt2;
#else
  return KernelId::attn_mt_standin;
#endif
}

// The shapes to try for rows of |dk_chunks| 16-dim chunks, in order.
std::vector<MtShape> mt_shapes(std::uint32_t dk_chunks) {
  std::vector<MtShape> out;
  const auto add = [&](std::span<const MtShape> s) {
    // One at a time: GCC 12 warns of a buffer overflow (-Wstringop-overflow, a false
    // positive that -Werror makes fatal) on out.insert(out.end(), s.begin(), s.end()).
    for (const MtShape& one : s) out.push_back(one);
  };
  if (dk_chunks <= kMtRowOnlyChunks) {
    add(kMtRowShapes);
  } else if (dk_chunks <= kMtRowFirstChunks) {
    add(kMtRowShapes);
    add(kMtDimShapes);
  } else {
    add(kMtDimShapes);
    add(kMtRowShapes);
  }
  add(kMtOneRowGroup);
  return out;
}

// attn_mt.comp's shared memory in uints: queries (the row split's; the dim split's pass
// through the K rows), K and V rows as f16 at odd 16-byte pitches, a score slab per
// subgroup, probabilities and row factors per row group, the key marks and the rows'
// positions and sequences.
std::uint64_t mt_bytes(const MtShape& s, std::uint32_t dk_chunks, std::uint32_t dv_chunks, bool v_from_k) {
  const std::uint64_t rows = 16u * s.row_groups, keys = 16u * s.key_chunks;
  const std::uint64_t qp = ((2u * dk_chunks) | 1u) * 4u, vp = ((2u * dv_chunks) | 1u) * 4u;
  const std::uint64_t slabs = s.subgroups() * 16 * (keys + 4) + s.row_groups * (16 * (((keys / 8) | 1u) * 4) + 16);
  return 4 * ((s.dim_slices > 1 || s.q_regs ? 4 : rows * qp) + keys * qp + (v_from_k ? 4 : keys * vp) + slabs +
              3 * keys * (s.prefetch ? 2 : 1) + 2 * rows);
}

}  // namespace

std::optional<Dispatches> matrix_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                      std::shared_ptr<TensorImpl> q, const KeySource& keys,
                                                      const KeySource& values, std::shared_ptr<TensorImpl> out,
                                                      std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                                      const std::vector<float>& sinks) {
  // The cooperative-matrix kernel where the device's matrix path chose the units (and
  // their self-test passed when the backend was made), the stand-in where it was forced
  // (DeviceOptions::matrix_units or $VKATTN_MATRIX = standin); else the f32 kernels run.
  const DeviceLimits& l = ctx.limits;
  const bool units = l.matrix_units;
  const std::uint32_t sg = matrix_subgroup_size(l);
  // Both forms need full subgroups of a known power-of-two size (8 to 64) with shuffles
  // and votes (the scalar pass); without them (the Vulkan minimums) the f32 kernels run.
  if (!sg || !l.subgroup_shuffle || !l.subgroup_vote || !l.subgroup_size_control || !std::has_single_bit(sg) || sg < 8 ||
      sg > 64 || sg < l.subgroup_min_size || sg > l.subgroup_max_size || l.max_storage_buffers < 8) {
    return std::nullopt;
  }
  const std::uint32_t n_tokens = u32(q->shape[0]), n_heads = u32(q->shape[1]), head_dim = u32(q->shape[2]);
  const std::uint32_t group = n_heads / keys.n_kv_heads;
  // The stand-in pads the rows to a power of two of 16-dim chunks up to 8, a multiple of 4
  // past that (zeros: the results are the same): fewer pipelines for llvmpipe to compile,
  // each tens of seconds.
  const auto padded = [](std::uint32_t dim) {
    const std::uint32_t c = u32(ceil_div(dim, 16));
    return c <= 8 ? std::bit_ceil(c) : u32(ceil_div(c, 4) * 4);
  };
  const std::uint32_t dk_chunks = padded(head_dim), dv_padded = padded(values.head_dim);
  const bool v_from_k = values_in_keys(keys, values) && !p.rope_on_read;  // rotated K rows cannot serve as V
  const bool per_seq = keys.meta_stride != 0;
  const PrefillTuning& tune = ctx.prefill;
  const auto rows_for = [&](std::uint32_t cap) { return tile_rows(cap, n_tokens, group, per_seq, p.q_seq); };
  std::optional<MatrixTilePlan> plan;
  const bool nv2 = units && ctx.physical.matrix_nv2 && tune.matrix_nv2 && tune.matrix_skip == 0;
  if (nv2) plan = plan_matrix2_tile(l, tune, sg, dk_chunks, dv_padded, v_from_k, rows_for);
  if (!plan) plan = plan_matrix_tile(l, tune, sg, dk_chunks, dv_padded, v_from_k, rows_for);
  if (!plan) return std::nullopt;
  const MtShape shape = plan->shape;
  const std::uint32_t rows = plan->rows, dv_chunks = plan->dv_chunks;
  const std::uint32_t wg = shape.subgroups() * sg, keys_per_tile = 16 * shape.key_chunks;
  RowTiles rt = row_tiles(ctx, *q, keys, values, rows, keys_per_tile);
  if (ctx.physical.cpu()) {
    // llvmpipe stops loops after 65,535 iterations over the whole run: each split's tiles
    // times the loop iterations of one tile (the tile loop, the marks and their rows,
    // staging, the scores' dim chunks, the scalar pass's two over a lane's keys of each of
    // its rows (and the partial scores' slices), the stand-in's accumulator loops) stay
    // below, after what each workgroup runs once (queries, span, output). Rows of K or V
    // not in whole vec4s are loaded element by element (tensor_load.glsl's loop of 4 for
    // each staged vec4).
    const std::uint64_t slices = shape.dim_slices, dks = dk_chunks / slices, dvs = dv_chunks / slices;
    const std::uint64_t pass_rows = 16 / slices, lanes_per_row = std::max<std::uint64_t>(1, sg / pass_rows);
    const std::uint64_t rows_per_lane = std::max<std::uint64_t>(1, pass_rows / sg), keys_per_lane = keys_per_tile / lanes_per_row;
    const std::uint64_t k_each = rows_aligned(keys, 4) ? 1 : 5, v_each = rows_aligned(values, 4) ? 1 : 5;
    const std::uint64_t inner = 1 + (1 + std::uint64_t{rows}) * ceil_div(keys_per_tile, wg) +
                                k_each * ceil_div(std::uint64_t{keys_per_tile} * dk_chunks * 4, wg) +
                                v_each * ceil_div(std::uint64_t{keys_per_tile} * dv_chunks * 4, wg) + dks +
                                dvs * (1 + shape.key_chunks) + rows_per_lane * keys_per_lane * (3 + 2 * (slices - 1)) / 2;
    const std::uint64_t once = ceil_div(std::uint64_t{16} * shape.row_groups * dk_chunks * 4, wg) +
                               (slices > 1 || shape.q_regs ? shape.row_groups * (1 + dks) : 0) + rows + 2 * dvs + n_tokens + 8;
    const std::uint64_t per_split = (kCpuLoopLimit - std::min(once, kCpuLoopLimit / 2)) / inner;
    const std::uint64_t needed = ceil_div(ceil_div(keys.n_keys, keys_per_tile), std::max<std::uint64_t>(1, per_split));
    if (needed > most_splits(rows)) return std::nullopt;  // the f32 kernels take it
    rt.splits = std::max(rt.splits, needed);
  }
  Dispatch d;
  d.key = {KernelId::attn_mt_standin, spec({{VKATTN_SPEC_WG_SIZE, wg},
                                            {VKATTN_SPEC_MT_SG, sg},
                                            {VKATTN_SPEC_MT_CHECK, units ? 0u : 1u},
                                            {VKATTN_SPEC_MT_SUBGROUPS, shape.subgroups()},
                                            {VKATTN_SPEC_MT_DIM_SLICES, shape.dim_slices},
                                            {VKATTN_SPEC_MT_KEY_CHUNKS, shape.key_chunks},
                                            {VKATTN_SPEC_MT_DK_CHUNKS, dk_chunks},
                                            {VKATTN_SPEC_MT_DV_CHUNKS, dv_chunks},
                                            {VKATTN_SPEC_MT_Q_F16, q->dtype == DType::f16 ? 1u : 0u},
                                            {VKATTN_SPEC_MT_K_TYPE, keys.type},
                                            {VKATTN_SPEC_MT_V_TYPE, values.type},
                                            {VKATTN_SPEC_MT_Q_ALIGNED, head_dim % 4 == 0 ? 1u : 0u},
                                            {VKATTN_SPEC_MT_K_ALIGNED, rows_aligned(keys, 4) ? 1u : 0u},
                                            {VKATTN_SPEC_MT_V_ALIGNED, rows_aligned(values, 4) ? 1u : 0u},
                                            {VKATTN_SPEC_MT_MULTI_SEQ, per_seq && keys.n_seqs > 1 ? 1u : 0u},
                                            {VKATTN_SPEC_MT_V_FROM_K, v_from_k ? 1u : 0u},
                                            {VKATTN_SPEC_MT_ROPE_ON_READ, p.rope_on_read ? 1u : 0u},
                                            {VKATTN_SPEC_MT_ROPE_INTERLEAVED, p.rope.layout == RopeLayout::interleaved ? 1u : 0u},
                                            {VKATTN_SPEC_MT_RESCALE_ALWAYS, 0u},
                                            {VKATTN_SPEC_MT_Q_REGS, shape.q_regs ? 1u : 0u},
                                            {VKATTN_SPEC_MT_PREFETCH, shape.prefetch ? 1u : 0u},
                                            {VKATTN_SPEC_MT_SKIP, tune.matrix_skip},
                                            {VKATTN_SPEC_MT_STAGE_BATCH, tune.matrix_batch ? 1u : 0u}})};
  // The stand-in checks the KHR rules the hardware enforces (MT_CHECK, on in tests); the
  // cooperative-matrix form has nothing to check.
  if (units) d.key.kernel = plan->nv2 ? units2_kernel() : units_kernel(ctx, false);
  d.key.subgroup_size = sg;
  return finish_row_tiles(ctx, params, scratch, std::move(d), std::move(q), keys, values, std::move(out), std::move(mask), p,
                          sinks, rt);
}

std::optional<MatrixTilePlan> plan_matrix_tile(const DeviceLimits& l, const PrefillTuning& tune, std::uint32_t sg,
                                               std::uint32_t dk_chunks, std::uint32_t dv_padded, bool v_from_k,
                                               const std::function<std::uint32_t(std::uint32_t cap)>& rows_for) {
  // $VKATTN_PREFILL's matrix_* knobs change the row split's shapes, which may then take all
  // the shared memory the device has.
  const std::uint64_t budget = tile_budget(l.max_shared_memory, tune.matrix_tuned(), kMtMaxBytes);
  std::vector<MtShape> shapes = mt_shapes(dk_chunks);
  for (MtShape& s : shapes) {
    s.prefetch = tune.matrix_prefetch;
    if (s.dim_slices > 1) continue;
    if (tune.matrix_rows) s.row_groups = tune.matrix_rows / 16;
    if (tune.matrix_keys) s.key_chunks = tune.matrix_keys / 16;
    s.q_regs = tune.matrix_queries == PrefillTuning::MatrixQueries::registers && dk_chunks <= kMtSliceQChunks;
  }
  for (const MtShape& s : shapes) {
    // The dim split's slices are whole chunks: V padded to a multiple of them (still within
    // K's chunks when V is K's prefix, which a slice then reads past v_head_dim: discarded).
    const std::uint32_t dv = u32(ceil_div(dv_padded, s.dim_slices) * s.dim_slices);
    if (s.dim_slices > 1) {
      if (dk_chunks % s.dim_slices != 0 || dk_chunks / s.dim_slices > kMtSliceQChunks || dv / s.dim_slices > kMtSliceOChunks) {
        continue;
      }
      // The scalar pass gives a row sg / (16 / slices) lanes, each two keys or more.
      if (sg * s.dim_slices > 128 * s.key_chunks) continue;
    }
    const std::uint32_t r = rows_for(16 * s.row_groups);
    if (ceil_div(r, 16) < s.row_groups) continue;  // a row group of repeated rows
    if (s.subgroups() * sg > l.max_workgroup_invocations) continue;
    const std::uint64_t bytes = mt_bytes(s, dk_chunks, dv, v_from_k);
    if (bytes > budget) continue;
    return MatrixTilePlan{s, r, dv, bytes};
  }
  return std::nullopt;
}

std::optional<MatrixTilePlan> plan_matrix2_tile(const DeviceLimits& l, const PrefillTuning& tune, std::uint32_t sg,
                                                std::uint32_t dk_chunks, std::uint32_t dv_padded, bool v_from_k,
                                                const std::function<std::uint32_t(std::uint32_t cap)>& rows_for) {
  if (dk_chunks > kMt2MaxChunks || dv_padded > kMt2MaxChunks) return std::nullopt;
  const std::uint64_t budget = tile_budget(l.max_shared_memory, tune.matrix_tuned(), kMtMaxBytes);
  for (MtShape s : kMt2Shapes) {
    s.prefetch = tune.matrix_prefetch;
    if (tune.matrix_rows) s.row_groups = tune.matrix_rows / 16;
    if (tune.matrix_keys) s.key_chunks = tune.matrix_keys / 16;
    const std::uint32_t r = rows_for(16 * s.row_groups);
    if (ceil_div(r, 16) < s.row_groups) continue;  // a row group of repeated rows
    if (s.subgroups() * sg > l.max_workgroup_invocations) continue;
    const std::uint64_t bytes = mt2_bytes(s, dk_chunks, dv_padded, v_from_k);
    if (bytes > budget) continue;
    return MatrixTilePlan{s, r, dv_padded, bytes, true};
  }
  return std::nullopt;
}

std::uint32_t matrix_subgroup_size(const DeviceLimits& l) {
  if (l.matrix_units) return l.subgroup_size;
  if (l.matrix_standin) return preferred_subgroup_size(l);
  return 0;
}

std::vector<std::uint32_t> matrix_selftest(const std::shared_ptr<Context>& ctx, std::span<const std::uint32_t> words,
                                           std::uint32_t sg, bool units) {
  if (words.size() != kMatrixSelftestWords) {
    throw InvalidArgument("matrix_selftest", "words.size()", std::to_string(words.size()), std::to_string(kMatrixSelftestWords));
  }
  auto in = std::make_shared<VulkanTensor>(ctx, Shape{words.size()}, DType::f32);
  auto out = std::make_shared<VulkanTensor>(ctx, Shape{4 * 256}, DType::f32);
  in->store(words);
  Dispatch d;
  d.op = "mt_selftest";
  d.key = {units ? units_kernel(*ctx, true) : KernelId::mt_selftest_standin,
           spec({{VKATTN_SPEC_WG_SIZE, sg}, {VKATTN_SPEC_MT_SG, sg}, {VKATTN_SPEC_MT_CHECK, units ? 0u : 1u}})};
  d.key.subgroup_size = sg;
  d.bindings = {read_binding(in), write_binding(out)};
  d.groups = 1;
  finish_dispatch(d, ctx->limits);
  const std::uint8_t no_params[16] = {};
  auto enc = prepare_encoding(ctx, std::span<const Dispatch>(&d, 1), no_params, false);
  enc->cb = enc->submission.begin();
  record_commands(*enc, std::span<const Dispatch>(&d, 1), enc->cb, true,
                  VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                  VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT);
  enc->submission.end();
  enc->submission.submit_and_wait(ctx->options.submit_timeout_ms);
  std::vector<std::uint32_t> result(4 * 256);
  ctx->read(*out->buffer, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(result.data()), result.size() * 4));
  return result;
}

}  // namespace vkattn::detail
