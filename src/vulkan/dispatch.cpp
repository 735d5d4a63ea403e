// What the command list builds on: the parameter arena, grids within the device's
// workgroup-count limits, and the comparison that lets a replay keep its encoding.
#include <algorithm>
#include <cstring>
#include <variant>

#include "common/shape_math.hpp"
#include "vulkan/check.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/vulkan_command_list.hpp"

namespace vkattn::detail {

Binding ParamArena::allocate(std::size_t words, std::uint8_t** out) {
  const std::uint64_t offset = ceil_div(bytes_.size(), alignment_) * alignment_;
  const std::uint64_t size = 4 * std::max<std::uint64_t>(1, words);
  bytes_.resize(offset + size, 0);
  if (out) *out = bytes_.data() + offset;
  return Binding{nullptr, offset, size, false};
}

Binding ParamArena::add_bytes(const void* data, std::size_t words) {
  std::uint8_t* at = nullptr;
  const Binding b = allocate(words, &at);
  if (words) std::memcpy(at, data, 4 * words);
  return b;
}

std::array<std::uint32_t, 3> fold_grid(std::uint64_t groups, const DeviceLimits& limits) {
  const auto& max = limits.max_workgroup_count;
  const std::uint64_t x = std::min<std::uint64_t>(std::max<std::uint64_t>(groups, 1), max[0]);
  std::uint64_t y = ceil_div(groups, x);
  std::uint64_t z = 1;
  if (y > max[1]) {
    z = ceil_div(y, max[1]);
    y = max[1];
  }
  if (z > max[2]) {
    throw Error(ErrorCode::unsupported, std::to_string(groups) + " workgroups exceed maxComputeWorkGroupCount", "fold_grid", 0,
                current_op());
  }
  return {static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y), static_cast<std::uint32_t>(z)};
}

void finish_dispatch(Dispatch& d, const DeviceLimits& limits) {
  d.groups = std::max<std::uint64_t>(d.groups, 1);
  fold_grid(d.groups, limits);  // fail at record time, not at submit
  // The pipeline's layout follows the bindings and push constants, so they cannot disagree.
  d.key.n_bindings = static_cast<std::uint32_t>(d.bindings.size());
  d.key.push_bytes = static_cast<std::uint32_t>(d.push.size());
  d.key.texel_bindings = 0;
  std::uint32_t storage = 0;
  for (std::size_t b = 0; b < d.bindings.size(); ++b) {
    if (d.bindings[b].texel)
      d.key.texel_bindings |= 1u << b;
    else
      ++storage;
  }
  // Inputs too large for texel views (maxTexelBufferElements) are bound as storage
  // buffers, and a device may allow as few as 4 per kernel.
  if (storage > limits.max_storage_buffers) {
    throw Error(ErrorCode::unsupported,
                std::string(d.op) + " binds " + std::to_string(storage) + " storage buffers; this device allows a kernel " +
                    std::to_string(limits.max_storage_buffers) +
                    " (inputs larger than maxTexelBufferElements texels cannot be read through texel views)",
                "maxPerStageDescriptorStorageBuffers", 0, d.op);
  }
  // Every kernel is one-dimensional, VKATTN_SPEC_WG_SIZE invocations wide: a plan past the
  // device's invocations (maxComputeWorkGroupSize[0] folded in) is the library's bug, told
  // here by name rather than left to the driver.
  const std::uint32_t wg = d.key.spec.empty() ? 0 : d.key.spec[VKATTN_SPEC_WG_SIZE];
  if (wg > limits.max_workgroup_invocations) {
    throw Error(ErrorCode::unsupported,
                std::string(d.op) + " was planned with workgroups of " + std::to_string(wg) +
                    " invocations; this device allows " + std::to_string(limits.max_workgroup_invocations) +
                    " (maxComputeWorkGroupInvocations, and maxComputeWorkGroupSize[0])",
                "maxComputeWorkGroupInvocations", 0, d.op);
  }
}

bool same_dispatch(const Dispatch& x, const Dispatch& y) {
  if (x.key != y.key || x.groups != y.groups || x.push != y.push || x.bindings.size() != y.bindings.size()) return false;
  for (std::size_t j = 0; j < x.bindings.size(); ++j) {
    const Binding &u = x.bindings[j], &v = y.bindings[j];
    if (u.tensor != v.tensor || u.param_offset != v.param_offset || u.param_bytes != v.param_bytes || u.write != v.write ||
        u.texel != v.texel) {
      return false;
    }
  }
  return true;
}

namespace {

// The queries' sequences and attention parameters of an op that has them.
const ScoresParams* scores_params(const OpCall& call) {
  if (const auto* c = std::get_if<ScoresCall>(&call)) return &c->params;
  if (const auto* c = std::get_if<AttentionCall>(&call)) return &c->params;
  return nullptr;
}

const std::vector<std::int32_t>* q_seq_of(const OpCall& call) {
  if (const auto* c = std::get_if<WeightedSumCall>(&call)) return &c->q_seq;
  const ScoresParams* p = scores_params(call);
  return p ? &p->q_seq : nullptr;
}

bool copy_if_same_size(std::uint8_t* at, std::uint32_t words, std::span<const std::int32_t> values) {
  if (values.size() != words) return false;
  std::memcpy(at, values.data(), 4 * values.size());
  return true;
}

}  // namespace

bool write_append_rows(std::uint8_t* at, std::uint32_t n, bool paged, const AppendCall& call) {
  const std::size_t bytes = 4 * std::size_t{n};
  return copy_if_same_size(at, n, call.dst_rows) && copy_if_same_size(at + bytes, n, call.positions) &&
         (!paged || copy_if_same_size(at + 2 * bytes, n, call.meta_rows));
}

TokenMarks ParamArena::take_marks() {
  const bool meta = std::any_of(marks_.begin(), marks_.end(), [](const TokenWords& w) { return w.kind == TokenWords::meta; });
  TokenMarks kept;
  for (const TokenWords& w : marks_) {
    if (!meta || w.kind != TokenWords::q_seq) kept.push_back(w);
  }
  marks_.clear();
  return kept;
}

bool patch_tokens(std::uint8_t* arena, const TokenMarks& marks, const OpCall& call) {
  static const std::vector<float> no_sinks;
  const auto* rope = std::get_if<RopeCall>(&call);
  const auto* append = std::get_if<AppendCall>(&call);
  for (const TokenWords& w : marks) {
    std::uint8_t* at = arena + w.offset;
    switch (w.kind) {
      case TokenWords::meta: {
        const ScoresParams* p = scores_params(call);
        const auto* attention = std::get_if<AttentionCall>(&call);
        if (!p || !patch_attn_meta(at, w, *p, attention && w.extra ? attention->sinks : no_sinks)) return false;
        break;
      }
      case TokenWords::rope_positions:
        if (!rope || !copy_if_same_size(at, w.words, rope->positions)) return false;
        break;
      case TokenWords::rope_table:
        if (!rope || !patch_rope_table(at, w, *rope)) return false;
        break;
      case TokenWords::append_rows:
        // New tokens that copy shared blocks need those dispatches: built again.
        if (!append || !append->copies.empty() || !write_append_rows(at, w.words, w.extra != 0, *append)) return false;
        break;
      case TokenWords::block_copies: return false;
      case TokenWords::q_seq: {
        const std::vector<std::int32_t>* q_seq = q_seq_of(call);
        if (!q_seq || q_seq->size() != w.words || std::memcmp(at, q_seq->data(), 4 * q_seq->size()) != 0) return false;
        break;
      }
    }
  }
  return true;
}

}  // namespace vkattn::detail
