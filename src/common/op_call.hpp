// An op as the frontend hands it to a backend: its checked arguments as one value. A
// backend has one entry point, CommandListImpl::record(const OpCall&), and dispatches on
// the variant (the CPU backend beside its reference, cpu/cpu_ops.cpp; the Vulkan backend
// in vulkan/ops/<op>_op.cpp through build()). The spans and references point at the
// frontend's data and live only for the call: a backend copies what it keeps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "common/tensor_impl.hpp"

namespace vkattn::detail {

using TensorPtr = std::shared_ptr<TensorImpl>;
using CachePtr = std::shared_ptr<KvCacheImpl>;

// Where an op's keys or values come from: plain tensors (|cache| null), or a KV cache
// (the tensors null).
struct KvSource {
  TensorPtr k, v;
  CachePtr cache;
};

struct CopyCall {
  TensorPtr src, dst;
};

// RoPE on |x|, and on |k| too when it is not null.
struct RopeCall {
  TensorPtr x, k;
  std::span<const std::int32_t> positions;  // three per token with M-RoPE
  const RopeConfig& config;                 // rotary_dim resolved
};

struct ScoresCall {
  TensorPtr q;
  KvSource keys;  // k or cache
  TensorPtr scores, mask;
  const ScoresParams& params;
};

struct SoftmaxCall {
  TensorPtr scores, probs;
  const std::vector<float>& sinks;  // n_heads values, or empty
};

struct WeightedSumCall {
  TensorPtr probs;
  KvSource values;  // v or cache
  TensorPtr out;
  const std::vector<std::int32_t>& q_seq;  // each token's sequence (read for a cache)
};

// Rows |dst_rows| (sequence * capacity + slot, -1: skipped) get K and V of each token.
struct AppendCall {
  CachePtr cache;
  TensorPtr k, v;  // v null for a latent cache
  std::span<const std::int32_t> dst_rows, positions;
};

struct CopySequenceCall {
  CachePtr cache;
  std::size_t src, dst;
};

// CommandList::attention.
struct AttentionCall {
  TensorPtr q;
  KvSource kv;
  TensorPtr out, mask;
  const ScoresParams& params;
  const std::vector<float>& sinks;  // n_heads values, or empty
  AttentionPath path;
};

// Every op's call, once: the variant below and the Vulkan backend's declarations of build()
// (vulkan/dispatch.hpp) come from this list, so that a new op adds its struct and a line.
#define VKATTN_OP_CALLS(X) \
  X(CopyCall)              \
  X(RopeCall)              \
  X(ScoresCall)            \
  X(SoftmaxCall)           \
  X(WeightedSumCall)       \
  X(AppendCall)            \
  X(CopySequenceCall)      \
  X(AttentionCall)

// std::variant<the calls>: each entry adds ", Call" after a leading placeholder, dropped here.
template <class... Ts>
struct TypeList {};
template <class... Calls>
std::variant<Calls...> variant_of(TypeList<void, Calls...>);
#define VKATTN_OP_CALL_TYPE(Call) , Call
using OpCall = decltype(variant_of(TypeList<void VKATTN_OP_CALLS(VKATTN_OP_CALL_TYPE)>{}));
#undef VKATTN_OP_CALL_TYPE

}  // namespace vkattn::detail
