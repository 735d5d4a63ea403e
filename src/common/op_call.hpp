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

#include "common/kv_cache_impl.hpp"
#include "common/tensor_impl.hpp"
#include "common/validate.hpp"

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

// Rows |dst_rows| (sequence * capacity + slot; a paged cache's rows of its pool; -1:
// skipped) get K and V of each token. A paged cache: |meta_rows| are the tokens' words of
// the slot table (seq * meta_stride + slot), and before anything is written each
// (from, to) pair of |copies| copies block from's rows into block to.
struct AppendCall {
  CachePtr cache;
  TensorPtr k, v;  // v null for a latent cache
  std::span<const std::int32_t> dst_rows, positions;
  std::span<const std::int32_t> meta_rows = {}, copies = {};
};

// A paged cache's fork also copies block |fork.from| into |fork.to|, dst's block at table
// entry |fork.entry| (-1: none), and shares src's other blocks.
struct CopySequenceCall {
  CachePtr cache;
  std::size_t src, dst;
  KvCacheImpl::ForkPlan fork = {};
};

// CommandList::attention.
struct AttentionCall {
  TensorPtr q;
  KvSource kv;
  TensorPtr out, mask;
  const ScoresParams& params;
  const std::vector<float>& sinks;  // n_heads values, or empty
  AttentionPath path;
  AttentionPrecision precision = AttentionPrecision::f32;
  std::uint32_t mask_keys = 0;  // AttentionConfig::mask_keys, checked
  bool key_list = false;        // |mask| is a key list, i32 [n_tokens, width] (checked)
};

// Each op's checks (validate.cpp, validate_attention.cpp; shared helpers in validate.hpp),
// which the frontend runs before it makes the op's call. Each throws InvalidArgument
// naming the op, the parameter, its value and the valid range.
// Checks x (and, for rope on Q and K together, k: may be null) and the positions; returns
// the resolved config.
RopeConfig check_rope(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                      const RopeConfig& config);

// Its token part: n_tokens positions, each in [0, 2^31).
void check_rope_positions(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                          const RopeConfig& config);

void check_copy(const TensorImpl& src, const TensorImpl& dst);

// What attention() alone takes, for the stage ops that take an AttentionConfig: they
// compute in f32 only (a config that asks for f16 products is refused by name rather than
// run more precisely than a caller timing it would think) and read every key (mask_keys).
void check_stage_config(const AttentionConfig& config, const char* op);
// |op|: the op named in errors (attention runs the scores and softmax checks as its own).
ScoresParams check_attn_scores(const TensorImpl& q, const TensorImpl& k, const TensorImpl& scores, const TensorImpl* mask,
                               const AttentionTokens& tokens, const AttentionConfig& config, const char* op = "attn_scores");
// The token part of those checks alone, into |p| (its arrays' memory reused): positions
// and sequence ids of n_tokens queries and n_keys keys. A replayed op runs only this part
// and the cache's (below): the shapes, dtypes and config it was recorded with cannot change.
void check_attn_tokens(const char* op, ScoresParams& p, const AttentionTokens& tokens, std::size_t n_tokens, std::size_t n_keys);
// attn_scores refuses sinks: they enter the softmax's denominator, not the scores, and a
// config given to attn_scores but not attn_softmax would otherwise lose them silently.
void check_no_sinks(const AttentionConfig& config);
// Returns the sinks (n_heads values or empty).
std::vector<float> check_attn_softmax(const TensorImpl& scores, const TensorImpl& probs, const AttentionConfig& config,
                                      const char* op = "attn_softmax");
void check_attn_weighted_sum(const TensorImpl& probs, const TensorImpl& v, const TensorImpl& out);

// The same against a KV cache (n_keys = capacity).
ScoresParams check_attn_scores_cache(const TensorImpl& q, const KvCacheImpl& cache, const TensorImpl& scores,
                                     const TensorImpl* mask, const AttentionTokens& tokens, const AttentionConfig& config,
                                     const char* op = "attn_scores");
// The token part against a cache: the queries' sequences, keys their rings still hold, the
// slot tables (and KvRope::on_read's in-cache positions) into |p|.
void check_attn_cache_tokens(const char* op, ScoresParams& p, const KvCacheImpl& cache, const AttentionTokens& tokens,
                             std::size_t n_tokens);
std::vector<std::int32_t> check_attn_weighted_sum_cache(const TensorImpl& probs, const KvCacheImpl& cache, const TensorImpl& out,
                                                        const AttentionTokens& tokens);

// CommandList::attention: the scores and softmax checks (named "attention"), v the shape
// of k, out the shape of q, and the dtypes.
struct AttentionArgs {
  ScoresParams scores;
  std::vector<float> sinks;
  AttentionPath path = AttentionPath::automatic;
  AttentionPrecision precision = AttentionPrecision::f32;
  std::uint32_t mask_keys = 0;
  bool key_list = false;  // the mask is a key list
};
AttentionArgs check_attention(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v, const TensorImpl& out,
                              const TensorImpl* mask, const AttentionTokens& tokens, const AttentionConfig& config);
AttentionArgs check_attention_cache(const TensorImpl& q, const KvCacheImpl& cache, const TensorImpl& out, const TensorImpl* mask,
                                    const AttentionTokens& tokens, const AttentionConfig& config);
// k, v for an append (v null for a latent cache); returns nothing, throws on mismatch with
// the cache.
void check_kv_append(const KvCacheImpl& cache, const TensorImpl& k, const TensorImpl* v, std::span<const std::int32_t> positions,
                     std::span<const std::int32_t> seq_ids);
// Its token part: positions and sequence ids for k's tokens.
void check_kv_append_tokens(const KvCacheImpl& cache, const TensorImpl& k, std::span<const std::int32_t> positions,
                            std::span<const std::int32_t> seq_ids);

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
