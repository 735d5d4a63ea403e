// Host side of the KV cache's ops on the device: kv_append (the rows and the slot table)
// and kv_copy_sequence.
#include <cassert>

#include "common/kv_cache_impl.hpp"
#include "common/quant.hpp"
#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

static_assert(kQuantBlock == VKATTN_QUANT_BLOCK);

namespace {

// A paged cache's copy-on-write: for each (from, to) pair of |pairs| (copied into the
// parameters), block to of K and of V becomes block from (kv_blocks.comp), one dispatch
// each.
void copy_blocks(OpEnv& env, const KvCacheImpl& cache, std::span<const std::int32_t> pairs, Dispatches& ds) {
  static_assert(sizeof(shader::KvBlocksParams) == 16);
  const auto& c = cache.config;
  const Binding b = env.params.add(pairs);
  const std::uint32_t wg = workgroup_size(env.ctx, 64);
  for (const auto& [t, d] : {std::pair{cache.k, c.head_dim}, std::pair{cache.v, value_head_dim(c)}}) {
    if (!t) continue;  // a latent cache's V, inside K
    const std::uint64_t elems = std::uint64_t{c.block_size} * c.n_kv_heads * d;
    const std::uint64_t words = value_words(elems, c.dtype);
    const std::uint64_t halves = is_quantized(c.dtype) ? elems / kQuantBlock : 0;
    Dispatch& x = ds.emplace_back();
    x.op = "kv_append";
    x.key = {KernelId::kv_blocks, spec({{VKATTN_SPEC_WG_SIZE, wg}})};
    x.bindings = {write_binding(t), b};
    x.set_push(shader::KvBlocksParams{.n_pairs = u32(pairs.size() / 2),
                                      .block_words = u32(words),
                                      .block_halves = u32(halves),
                                      .scales = u32(scale_words_offset(t->numel, c.dtype))});
    x.groups = pairs.size() / 2 * ceil_div(words + halves, wg);
  }
}

}  // namespace

// One dispatch, or one for k and one for v where a kernel may bind fewer than 6 storage
// buffers or V's rows are not K's width; k's alone for a latent cache (V inside K).
Dispatches build(OpEnv& env, const AppendCall& call) {
  const Context& ctx = env.ctx;
  ParamArena& params = env.params;
  const KvCacheImpl& cache = *call.cache;
  std::shared_ptr<TensorImpl> k = call.k, v = call.v;
  const std::span<const std::int32_t> dst_rows = call.dst_rows;
  static_assert(sizeof(shader::KvAppendParams) == 36);
  const auto& c = cache.config;
  const std::uint32_t wg = workgroup_size(ctx, 64);
  // A pair of elements per invocation, or a block of 32 for the quantized types.
  auto invocations = [&](std::size_t head_dim) {
    const std::uint64_t per_row = is_quantized(c.dtype) ? head_dim / kQuantBlock : (head_dim + 1) / 2;
    return std::uint64_t{dst_rows.size()} * c.n_kv_heads * per_row;
  };
  const auto n = u32(dst_rows.size());
  std::uint8_t* bytes = nullptr;
  const Binding rows = params.allocate(append_rows_words(n, c.paged), &bytes);
  [[maybe_unused]] const bool written = write_append_rows(bytes, n, c.paged, call);
  assert(written);  // plan_append sized them all
  params.mark({TokenWords::append_rows, rows.param_offset, n, c.paged ? 1u : 0u});
  const Binding slots = write_binding(cache.slots);
  Dispatches ds;
  // Shared blocks the tokens write are copied first (a replay that copies patches nothing).
  if (!call.copies.empty()) {
    params.mark({TokenWords::block_copies, 0, u32(call.copies.size())});
    copy_blocks(env, cache, call.copies, ds);
  }
  Dispatch& d = ds.emplace_back();
  d.op = "kv_append";
  d.key = {KernelId::kv_append, spec({{VKATTN_SPEC_WG_SIZE, wg},
                                      {VKATTN_SPEC_KV_APPEND_SRC_F16, k->dtype == DType::f16 ? 1u : 0u},
                                      {VKATTN_SPEC_KV_APPEND_DST_TYPE, kv_type_code(c.dtype)}})};
  // capacity: the slot-table words per sequence (a paged cache's block table follows its
  // slots).
  const shader::KvAppendParams pc{.n_tokens = n,
                                  .n_kv_heads = u32(c.n_kv_heads),
                                  .head_dim = u32(c.head_dim),
                                  .capacity = u32(cache.meta_stride()),
                                  .dst_scales = u32(scale_words_offset(cache.k->numel, c.dtype)),
                                  .write_slots = 1u,
                                  .bound_offset = u32(cache.bound_offset()),
                                  .page = c.paged ? cache.block_shift + 1 : 0u,
                                  .table = u32(c.capacity)};
  d.set_push(pc);
  d.groups = ceil_div(invocations(c.head_dim), wg);
  if (ctx.limits.max_storage_buffers >= 6 && value_head_dim(c) == c.head_dim && v) {
    d.bindings = {
        read_binding(std::move(k)), read_binding(std::move(v)), write_binding(cache.k), write_binding(cache.v), rows, slots};
    return ds;
  }
  // Six storage buffers are more than some devices allow a kernel, and V's rows may be
  // another width: k (with the slot table), then v.
  d.key.kernel = KernelId::kv_append_one;
  d.bindings = {read_binding(std::move(k)), write_binding(cache.k), rows, slots};
  if (!v) return ds;
  Dispatch& dv = ds.emplace_back(d);
  dv.bindings = {read_binding(std::move(v)), write_binding(cache.v), rows, slots};
  shader::KvAppendParams v_pc = pc;
  v_pc.head_dim = u32(value_head_dim(c));
  v_pc.dst_scales = u32(scale_words_offset(cache.v->numel, c.dtype));
  v_pc.write_slots = 0;
  dv.set_push(v_pc);
  dv.groups = ceil_div(invocations(value_head_dim(c)), wg);
  return ds;
}

// The sequence's slot-table entries and occupancy bound, keys and values (a quantized
// cache's codes and scales apart). A paged cache's fork: the entries with the block table,
// which then shares src's blocks, and the one block it copies.
Dispatches build(OpEnv& env, const CopySequenceCall& call) {
  const Context& ctx = env.ctx;
  const KvCacheImpl& cache = *call.cache;
  const std::size_t src = call.src, dst = call.dst;
  const auto& c = cache.config;
  const std::uint64_t stride = cache.meta_stride(), bounds = cache.bound_offset();
  Dispatches ds;
  ds.push_back(copy_dispatch(ctx, cache.slots, cache.slots, src * stride, dst * stride, stride));
  ds.push_back(copy_dispatch(ctx, cache.slots, cache.slots, bounds + src, bounds + dst, 1));
  if (c.paged) {
    // Which block the fork copies, and into which, is planned anew at each replay (the
    // pool has moved on): the op is built again, never patched.
    env.params.mark({TokenWords::block_copies, 0, 0});
    const KvCacheImpl::ForkPlan& f = call.fork;
    if (f.entry < 0) return ds;
    const std::int32_t to = f.to;
    Dispatch w =
        copy_dispatch(ctx, cache.slots, cache.slots, 0, dst * stride + c.capacity + static_cast<std::uint64_t>(f.entry), 1);
    w.bindings[0] = env.params.add(std::span<const std::int32_t>(&to, 1));
    w.bindings[0].texel = false;
    w.key.kernel = KernelId::copy_u32;
    ds.push_back(std::move(w));
    const std::int32_t pair[2] = {f.from, f.to};
    copy_blocks(env, cache, pair, ds);
    return ds;
  }
  for (const auto& t : {cache.k, cache.v}) {
    if (!t) continue;                             // a latent cache's V, inside K
    const std::uint64_t n = t->numel / c.n_seqs;  // elements per sequence
    if (!is_quantized(c.dtype)) {
      const std::uint64_t words = value_words(n, c.dtype);
      ds.push_back(copy_dispatch(ctx, t, t, src * words, dst * words, words));
      continue;
    }
    // Codes, then the scales: one half per block of 32, in whole words only when a
    // sequence has an even number of blocks.
    const std::uint64_t codes = value_words(n, c.dtype), blocks = n / kQuantBlock;
    ds.push_back(copy_dispatch(ctx, t, t, src * codes, dst * codes, codes));
    const std::uint64_t scales = scale_words_offset(t->numel, c.dtype);
    if (blocks % 2 == 0) {
      ds.push_back(copy_dispatch(ctx, t, t, scales + src * blocks / 2, scales + dst * blocks / 2, blocks / 2));
    } else {
      ds.push_back(copy_halves_dispatch(ctx, t, 2 * scales + src * blocks, 2 * scales + dst * blocks, blocks));
    }
  }
  return ds;
}

}  // namespace vkattn::detail
