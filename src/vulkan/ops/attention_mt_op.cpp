// Host side of attn_mt.comp, fused attention on the matrix-tile layer (mt.glsl) under
// AttentionPrecision::f16_products: whether it runs (the device's matrix path), its tile
// (subgroups of 16 rows, keys per tile) within the shared memory, and the splits.
// docs/kernel-shapes.md describes the kernel and the layer.
#include <algorithm>
#include <bit>
#include <string>

#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/encoding.hpp"

namespace vkattn::detail {

namespace {

// Subgroups (16 rows each) and 16-key chunks per tile, in order of preference; the first
// that fits min(maxComputeSharedMemorySize, 48 KiB) and the workgroup limit is taken, with
// no more subgroups than the tile has rows for.
struct MtShape {
  std::uint32_t subgroups, key_chunks;
};
constexpr MtShape kMtShapes[] = {{4, 2}, {4, 1}, {2, 2}, {2, 1}, {1, 2}, {1, 1}};
constexpr std::uint64_t kMtMaxBytes = 48 * 1024;
constexpr std::uint64_t kCpuLoopLimit = 60000;  // llvmpipe's 65,535, with room

// attn_mt.comp's shared memory in uints: queries, K and V rows as f16 at odd 16-byte
// pitches, a slab per subgroup (scores, probabilities, row factors), the key marks and the
// rows' positions and sequences.
std::uint64_t mt_bytes(const MtShape& s, std::uint32_t dk_chunks, std::uint32_t dv_chunks, bool v_from_k) {
  const std::uint64_t rows = 16u * s.subgroups, keys = 16u * s.key_chunks;
  const std::uint64_t qp = ((2u * dk_chunks) | 1u) * 4u, vp = ((2u * dv_chunks) | 1u) * 4u;
  const std::uint64_t slab = 16 * (keys + 4) + 16 * (((keys / 8) | 1u) * 4) + 16;
  return 4 * (rows * qp + keys * qp + (v_from_k ? 4 : keys * vp) + s.subgroups * slab + 3 * keys + 2 * rows);
}

}  // namespace

std::optional<Dispatches> matrix_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                      std::shared_ptr<TensorImpl> q, const KeySource& keys,
                                                      const KeySource& values, std::shared_ptr<TensorImpl> out,
                                                      std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                                      const std::vector<float>& sinks) {
  // The stand-in where the device's matrix path forces it (DeviceOptions::matrix_units or
  // $VKATTN_MATRIX = standin, decided when the backend is made). The cooperative-matrix
  // kernel (attn_mt, built where the toolchain allows) is not dispatched yet: where
  // DeviceLimits::matrix_units is set the f32 kernels still run.
  if (!ctx.limits.matrix_standin) return std::nullopt;
  const DeviceLimits& l = ctx.limits;
  const std::uint32_t sg = preferred_subgroup_size(l);
  // The layer's stand-in needs full subgroups of a known power-of-two size (8 to 64) with
  // shuffles and votes; without them (the Vulkan minimums) the f32 kernels run.
  if (!l.subgroup_shuffle || !l.subgroup_vote || !l.subgroup_size_control || !std::has_single_bit(sg) || sg < 8 || sg > 64 ||
      l.max_storage_buffers < 8) {
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
  const std::uint32_t dk_chunks = padded(head_dim), dv_chunks = padded(values.head_dim);
  const bool v_from_k = values_in_keys(keys, values) && !p.rope_on_read;  // rotated K rows cannot serve as V
  const bool per_seq = keys.meta_stride != 0;
  const std::uint64_t budget = std::min<std::uint64_t>(l.max_shared_memory, kMtMaxBytes);
  std::uint32_t rows = 0;
  MtShape shape{};
  for (const MtShape& s : kMtShapes) {
    const std::uint32_t r = tile_rows(16 * s.subgroups, n_tokens, group, per_seq, p.q_seq);
    if (ceil_div(r, 16) < s.subgroups) continue;  // a subgroup of repeated rows
    if (s.subgroups * sg > l.max_workgroup_invocations) continue;
    if (mt_bytes(s, dk_chunks, dv_chunks, v_from_k) > budget) continue;
    shape = s;
    rows = r;
    break;
  }
  if (!rows) return std::nullopt;
  const std::uint32_t wg = shape.subgroups * sg, keys_per_tile = 16 * shape.key_chunks;
  RowTiles rt = row_tiles(ctx, *q, keys, values, rows, keys_per_tile);
  if (ctx.physical.info.type == "cpu") {
    // llvmpipe stops loops after 65,535 iterations over the whole run: each split's tiles
    // times the loop iterations of one tile (the tile loop, the marks and their rows,
    // staging, the scores' dim chunks, the scalar pass's two over a lane's keys of each of
    // its rows, the stand-in's accumulator loops) stay below, after what each workgroup
    // runs once (queries, span, output). Rows of K or V not in whole vec4s are loaded
    // element by element (tensor_load.glsl's loop of 4 for each staged vec4).
    const std::uint64_t k_each = rows_aligned(keys, 4) ? 1 : 5, v_each = rows_aligned(values, 4) ? 1 : 5;
    const std::uint64_t inner = 1 + (1 + std::uint64_t{rows}) * ceil_div(keys_per_tile, wg) +
                                k_each * ceil_div(std::uint64_t{keys_per_tile} * dk_chunks * 4, wg) +
                                v_each * ceil_div(std::uint64_t{keys_per_tile} * dv_chunks * 4, wg) + dk_chunks +
                                dv_chunks * (1 + shape.key_chunks) +
                                3 * std::max(1u, 16 / sg) * (keys_per_tile / std::max(1u, sg / 16)) / 2;
    const std::uint64_t once =
        ceil_div(std::uint64_t{16} * shape.subgroups * dk_chunks * 4, wg) + rows + 2 * dv_chunks + n_tokens + 8;
    const std::uint64_t per_split = (kCpuLoopLimit - std::min(once, kCpuLoopLimit / 2)) / inner;
    const std::uint64_t needed = ceil_div(ceil_div(keys.n_keys, keys_per_tile), std::max<std::uint64_t>(1, per_split));
    if (needed > most_splits(rows)) return std::nullopt;  // the f32 kernels take it
    rt.splits = std::max(rt.splits, needed);
  }
  Dispatch d;
  d.key = {KernelId::attn_mt_standin, spec({{VKATTN_SPEC_WG_SIZE, wg},
                                            {VKATTN_SPEC_MT_SG, sg},
                                            {VKATTN_SPEC_MT_CHECK, 1u},
                                            {VKATTN_SPEC_MT_SUBGROUPS, shape.subgroups},
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
                                            {VKATTN_SPEC_MT_RESCALE_ALWAYS, 0u}})};
  d.key.subgroup_size = sg;
  return finish_row_tiles(ctx, params, scratch, std::move(d), std::move(q), keys, values, std::move(out), std::move(mask), p,
                          sinks, rt);
}

std::vector<std::uint32_t> matrix_selftest(const std::shared_ptr<Context>& ctx, std::span<const std::uint32_t> words,
                                           std::uint32_t sg) {
  if (words.size() != kMatrixSelftestWords) {
    throw InvalidArgument("matrix_selftest", "words.size()", std::to_string(words.size()), std::to_string(kMatrixSelftestWords));
  }
  auto in = std::make_shared<VulkanTensor>(ctx, Shape{words.size()}, DType::f32);
  auto out = std::make_shared<VulkanTensor>(ctx, Shape{4 * 256}, DType::f32);
  in->store(words);
  Dispatch d;
  d.op = "mt_selftest";
  d.key = {KernelId::mt_selftest_standin, spec({{VKATTN_SPEC_WG_SIZE, sg}, {VKATTN_SPEC_MT_SG, sg}, {VKATTN_SPEC_MT_CHECK, 1u}})};
  d.key.subgroup_size = sg;
  d.bindings = {tensor_binding(in, false), tensor_binding(out, true)};
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
