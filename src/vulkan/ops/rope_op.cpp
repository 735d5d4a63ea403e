// Host side of RoPE: the frequency table (64-bit fixed-point turns per token, built in
// long double; see shaders/common/rope_phase.glsl), the positions, and how a token's
// heads are split over workgroups.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "common/rope_math.hpp"
#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

// The cos/sin turns for |positions|: dynamic NTK scaling follows the largest of them.
const RopeTurns& turns_for(const RopeConfig& config, std::span<const std::int32_t> positions) {
  std::int32_t max_position = 0;
  for (std::int32_t p : positions) max_position = std::max(max_position, p);
  return rope_turn_words(config, max_position);
}

}  // namespace

Dispatches build(OpEnv& env, const RopeCall& call) {
  const Context& ctx = env.ctx;
  ParamArena& params = env.params;
  const std::shared_ptr<TensorImpl>& q = call.x;
  const std::shared_ptr<TensorImpl>& k = call.k;
  const std::span<const std::int32_t> positions = call.positions;
  const RopeConfig& config = call.config;
  static_assert(sizeof(shader::RopeParams) == 56);
  const auto n_tokens = static_cast<std::uint32_t>(q->shape[0]);
  const auto n_heads_q = static_cast<std::uint32_t>(q->shape[1]);
  const auto n_heads_k = k ? static_cast<std::uint32_t>(k->shape[1]) : 0u;
  const auto half_rot = static_cast<std::uint32_t>(config.rotary_dim / 2);
  const std::uint32_t total_heads = n_heads_q + n_heads_k;

  // 64 lanes cover one 128-dim row's pairs; the spec minimum is 128.
  const std::uint32_t wg = workgroup_size(ctx, 64);
  // A workgroup takes all heads of its token, so cos/sin are computed once per token;
  // with few tokens the heads are split so that at least ~16 workgroups run.
  const std::uint32_t splits = std::min(total_heads, std::max(1u, 16u / std::max(1u, n_tokens)));
  const auto heads_per_wg = u32(ceil_div(total_heads, splits));
  const auto wgs_per_token = u32(ceil_div(total_heads, heads_per_wg));

  // What one invocation owns (shaders/common/rope_unit.glsl): a 16-byte vector when every
  // row's rotated slice and its second half start on 16 bytes, else a pair, two pairs (f16), or a row (f16
  // with an odd number of pairs).
  const std::size_t head_dim = q->shape[2];
  const bool f16 = q->dtype == DType::f16;
  const bool inter = config.layout == RopeLayout::interleaved;
  const std::size_t per_vec = f16 ? 8 : 4;  // elements in 16 bytes
  const bool vec = head_dim % per_vec == 0 && config.rotary_offset % per_vec == 0 &&
                   (inter ? (2 * half_rot) % per_vec == 0 : half_rot % per_vec == 0);
  std::uint32_t unit = 0, units_per_row = 0;  // VKATTN_ROPE_UNIT_*
  if (vec) {
    unit = VKATTN_ROPE_UNIT_VEC4;
    units_per_row = static_cast<std::uint32_t>(inter ? 2 * half_rot / per_vec : half_rot / per_vec);
  } else if (!f16 || inter) {
    unit = VKATTN_ROPE_UNIT_PAIR;
    units_per_row = half_rot;
  } else if (half_rot % 2 == 0) {
    unit = VKATTN_ROPE_UNIT_PAIR2;
    units_per_row = half_rot / 2;
  } else {
    unit = VKATTN_ROPE_UNIT_ROW;
    units_per_row = 1;
  }

  const std::uint32_t mrope = !config.mrope                                     ? VKATTN_MROPE_NONE
                              : config.mrope->layout == MRopeLayout::contiguous ? VKATTN_MROPE_CONTIGUOUS
                                                                                : VKATTN_MROPE_INTERLEAVED;
  const std::array<std::uint32_t, 3> sections = config.mrope ? config.mrope->sections : std::array<std::uint32_t, 3>{};
  const RopeTurns& table = turns_for(config, positions);

  // 16-byte units read through texel views (written through the storage buffers) when
  // both tensors have them; see rope.comp.
  const bool texel = unit == VKATTN_ROPE_UNIT_VEC4 && has_texel_view(*q) && (!k || has_texel_view(*k));
  Dispatch d;
  d.op = "rope";
  const KernelId kernel =
      texel ? (f16 ? KernelId::rope_f16_texel : KernelId::rope_f32_texel) : (f16 ? KernelId::rope_f16 : KernelId::rope_f32);
  // The cos/sin table (8 bytes a pair, at most 8 KiB) fits the 16 KiB minimum.
  d.key = {kernel, spec({{VKATTN_SPEC_WG_SIZE, wg},
                         {VKATTN_SPEC_ROPE_HALF_ROT, std::max(1u, half_rot)},
                         {VKATTN_SPEC_ROPE_UNIT, unit},
                         {VKATTN_SPEC_ROPE_INTERLEAVED, inter ? 1u : 0u}})};
  const std::shared_ptr<TensorImpl>& k_or_q = k ? k : q;
  d.bindings = {write_binding(q), write_binding(k_or_q), params.add(positions), params.add(table.words)};
  const auto factor = static_cast<float>(table.attention_factor);
  params.mark({TokenWords::rope_positions, d.bindings[2].param_offset, u32(positions.size())});
  if (table_follows_positions(config)) {
    params.mark(
        {TokenWords::rope_table, d.bindings[3].param_offset, u32(table.words.size()), std::bit_cast<std::uint32_t>(factor)});
  }
  if (texel) {
    d.bindings.push_back(read_binding(q, true));
    d.bindings.push_back(read_binding(k_or_q, true));
  }
  d.set_push(shader::RopeParams{.n_tokens = n_tokens,
                                .n_heads_q = n_heads_q,
                                .n_heads_k = n_heads_k,
                                .head_dim = static_cast<std::uint32_t>(head_dim),
                                .rotary_dim = static_cast<std::uint32_t>(config.rotary_dim),
                                .units_per_row = units_per_row,
                                .heads_per_wg = heads_per_wg,
                                .wgs_per_token = wgs_per_token,
                                .attention_factor = factor,
                                .mrope = mrope,
                                .mrope_t = sections[0],
                                .mrope_h = sections[1],
                                .mrope_w = sections[2],
                                .rotary_offset = static_cast<std::uint32_t>(config.rotary_offset)});
  d.groups = std::uint64_t{n_tokens} * wgs_per_token;
  return one(std::move(d));
}

bool rope_fusable(const Dispatch& rope, const DeviceLimits& limits) {
  const KernelId k = rope.key.kernel;
  if (k != KernelId::rope_f32 && k != KernelId::rope_f16 && k != KernelId::rope_f32_texel && k != KernelId::rope_f16_texel) {
    return false;
  }
  shader::RopeParams pc{};
  std::memcpy(&pc, rope.push.data(), sizeof pc);
  // q and k, the cache's K and V, rows, slots and the turns: 8 storage buffers.
  return pc.n_heads_k > 0 && pc.mrope == VKATTN_MROPE_NONE && rope.bindings[0].tensor != rope.bindings[1].tensor &&
         limits.max_storage_buffers >= 8;
}

bool fuse_rope_append(const Dispatch& rope, Dispatches& append, const std::uint8_t* arena) {
  if (append.size() != 1 || append[0].key.kernel != KernelId::kv_append || append[0].bindings.size() != 6) return false;
  Dispatch& d = append[0];
  const std::shared_ptr<TensorImpl>&q = rope.bindings[0].tensor, &k = rope.bindings[1].tensor;
  // k appended is rope's k. v (read while q and k are written) and the cache's K and V
  // (written while q is) are neither of them, nor a view sharing their bytes (wrap).
  const auto apart = [&](const std::shared_ptr<TensorImpl>& t) {
    return t != q && t != k && !t->overlaps(*q) && !t->overlaps(*k);
  };
  if (d.bindings[0].tensor != k || !apart(d.bindings[1].tensor) || !apart(d.bindings[2].tensor) || !apart(d.bindings[3].tensor)) {
    return false;
  }
  shader::RopeParams r{};
  std::memcpy(&r, rope.push.data(), sizeof r);
  shader::KvRopeAppendParams pc{};
  std::memcpy(&pc.append, d.push.data(), sizeof pc.append);
  if (pc.append.n_kv_heads != r.n_heads_k || pc.append.n_tokens != r.n_tokens) return false;
  // The same positions: the kernel rotates by kv_append's (after its rows in binding 4).
  const std::size_t bytes = 4 * std::size_t{r.n_tokens};
  if (std::memcmp(arena + rope.bindings[2].param_offset, arena + d.bindings[4].param_offset + bytes, bytes) != 0) return false;
  pc.n_heads_q = r.n_heads_q;
  pc.rotary_dim = r.rotary_dim;
  pc.rotary_offset = r.rotary_offset;
  pc.units_per_row = r.units_per_row;
  pc.attention_factor = r.attention_factor;
  const bool f16 = rope.key.kernel == KernelId::rope_f16 || rope.key.kernel == KernelId::rope_f16_texel;
  d.op = "rope+kv_append";
  d.key.kernel = f16 ? KernelId::kv_append_rope_f16 : KernelId::kv_append_rope_f32;
  SpecConstants spec_values = d.key.spec;
  spec_values.resize(VKATTN_SPEC_KV_ROPE_INTERLEAVED + 1);
  spec_values[VKATTN_SPEC_KV_ROPE_HALF_ROT] = rope.key.spec[VKATTN_SPEC_ROPE_HALF_ROT];
  spec_values[VKATTN_SPEC_KV_ROPE_UNIT] = rope.key.spec[VKATTN_SPEC_ROPE_UNIT];
  spec_values[VKATTN_SPEC_KV_ROPE_INTERLEAVED] = rope.key.spec[VKATTN_SPEC_ROPE_INTERLEAVED];
  d.key.spec = spec_values;
  d.bindings[0].write = true;  // rotated in place
  d.bindings.push_back(write_binding(q));
  d.bindings.push_back(rope.bindings[3]);  // the turns: rope's own words, which its replay patches
  d.set_push(pc);
  d.groups = std::uint64_t{pc.append.n_tokens} * pc.append.n_kv_heads;
  return true;
}

bool patch_rope_table(std::uint8_t* bytes, const TokenWords& w, const RopeCall& call) {
  const RopeTurns& table = turns_for(call.config, call.positions);
  // The attention factor is a push constant, encoded in the command buffer.
  if (table.words.size() != w.words || std::bit_cast<std::uint32_t>(static_cast<float>(table.attention_factor)) != w.extra) {
    return false;
  }
  std::memcpy(bytes, table.words.data(), 4 * table.words.size());
  return true;
}

}  // namespace vkattn::detail
