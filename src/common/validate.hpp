// Argument checks shared by both backends. Each throws InvalidArgument naming the op, the
// parameter, its value and the valid range, before anything is recorded.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "common/heap_ledger.hpp"
#include "common/tensor_impl.hpp"
#include "vkattn/error.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::detail {

std::string shape_string(const Shape& shape);

// How an invalid handle is named.
inline constexpr const char* kEmptyTensor = "an empty Tensor (default-constructed or moved-from)";
inline constexpr const char* kEmptyCache = "an empty KvCache (default-constructed or moved-from)";
// Most heads alibi_slopes() serves (no model has more than a few hundred).
inline constexpr std::size_t kMaxAlibiHeads = 65536;

// A shape and dtype with no storage: what the checks of one op compare another's arguments
// against (the keys a cache stands for, the scores attention never writes).
class ShapeOnly final : public TensorImpl {
 public:
  ShapeOnly(Shape shape, DType dtype) : TensorImpl(nullptr, std::move(shape), dtype) {}
  void store(std::span<const std::uint32_t>) override {}
};

// Shared by the checks: a number as errors print it; an op's output is none of its
// inputs; a finite positive value.
std::string num(double v);
void check_distinct(const char* op, const char* out_name, const TensorImpl& out,
                    std::initializer_list<std::pair<const char*, const TensorImpl*>> inputs);
void check_positive(const char* op, const std::string& param, double v);

// A shape and dtype a tensor may have (Backend::tensor, wrap).
void check_new_tensor(const char* op, const Shape& shape, DType dtype);

// |t| is a live tensor of the backend |owner|.
const std::shared_ptr<TensorImpl>& check_tensor(const char* op, const char* param, const Tensor& t, const void* owner);

// Checks every field of |config| for a tensor with |head_dim|; returns it with rotary_dim
// resolved (0 -> head_dim).
RopeConfig check_rope_config(const char* op, const RopeConfig& config, std::size_t head_dim);

// Checks x (and, for rope on Q and K together, k: may be null) and the positions; returns
// the resolved config.
RopeConfig check_rope(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                      const RopeConfig& config);

// Each of |v| (positions or sequence ids, named |name|) in [0, 2^31).
void check_nonnegative(const char* op, const char* name, std::span<const std::int32_t> v);

// Its token part: n_tokens positions, each in [0, 2^31).
void check_rope_positions(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                          const RopeConfig& config);

void check_copy(const TensorImpl& src, const TensorImpl& dst);

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

}  // namespace vkattn::detail
