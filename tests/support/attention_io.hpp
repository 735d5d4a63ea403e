// One attention call's inputs and outputs on the host, in the layouts of
// command_list.hpp, and a runner that records the three stages on a backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/api.hpp"
#include "support/random.hpp"

namespace vkattn::test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

struct AttnInputs {
  std::size_t tokens = 1, heads = 1, kv_heads = 1, keys = 1, head_dim = 1;
  std::vector<float> q{}, k{}, v{}, mask{};                      // mask empty: none
  std::vector<std::int32_t> q_pos{}, k_pos{}, q_seq{}, k_seq{};  // seq ids empty: all in sequence 0
  AttentionConfig config{};
  DType q_dtype = DType::f32, kv_dtype = DType::f32;

  Shape scores_shape() const { return {tokens, heads, keys}; }
  Shape out_shape() const { return {tokens, heads, head_dim}; }
};

struct AttnOutputs {
  std::vector<float> scores, probs, out;
};

// |config| for attn_scores, which refuses sinks (they belong to attn_softmax).
inline AttentionConfig without_sinks(AttentionConfig config) {
  config.sinks.clear();
  return config;
}

// q, k, v (and the mask, if any) of |in| on |b|, uploaded.
struct AttnInputTensors {
  Tensor q, k, v, mask;
  const Tensor* mask_or_null() const { return mask.valid() ? &mask : nullptr; }
};
inline AttnInputTensors upload_inputs(Backend& b, const AttnInputs& in) {
  AttnInputTensors t{b.tensor({in.tokens, in.heads, in.head_dim}, in.q_dtype),
                     b.tensor({in.keys, in.kv_heads, in.head_dim}, in.kv_dtype),
                     b.tensor({in.keys, in.kv_heads, in.head_dim}, in.kv_dtype), Tensor{}};
  b.upload(t.q, in.q);
  b.upload(t.k, in.k);
  b.upload(t.v, in.v);
  if (!in.mask.empty()) {
    t.mask = b.tensor({in.tokens, in.keys}, DType::f32);
    b.upload(t.mask, in.mask);
  }
  return t;
}

// Records the three stages in one list and runs it. With |feed|, softmax reads feed->scores
// and the weighted sum feed->probs instead of the previous stage's result, so that each
// stage can be compared on identical inputs. |stats| receives the list's statistics.
inline AttnOutputs run_attention(Backend& b, const AttnInputs& in, const AttnOutputs* feed = nullptr,
                                 CommandStats* stats = nullptr) {
  const AttnInputTensors t = upload_inputs(b, in);
  Tensor scores = b.tensor(in.scores_shape(), DType::f32), probs = b.tensor(in.scores_shape(), DType::f32);
  Tensor out = b.tensor(in.out_shape(), DType::f32);
  Tensor fed_scores, fed_probs;
  if (feed) {
    fed_scores = b.tensor(in.scores_shape(), DType::f32);
    fed_probs = b.tensor(in.scores_shape(), DType::f32);
    b.upload(fed_scores, feed->scores);
    b.upload(fed_probs, feed->probs);
  }
  const AttentionTokens tokens{in.q_pos, in.k_pos, in.q_seq, in.k_seq};
  CommandList cmd = b.commands();
  cmd.attn_scores(t.q, t.k, scores, tokens, without_sinks(in.config), t.mask_or_null());
  cmd.attn_softmax(feed ? fed_scores : scores, probs, in.config);
  cmd.attn_weighted_sum(feed ? fed_probs : probs, t.v, out);
  cmd.submit_and_wait();
  if (stats) *stats = cmd.stats();
  return {b.download(scores), b.download(probs), b.download(out)};
}

// Records CommandList::attention on |in| with |config| (in.config, or another path on the
// same inputs without copying them) and returns out; |stats| receives the list's statistics.
inline std::vector<float> run_attention_op(Backend& b, const AttnInputs& in, const AttentionConfig& config,
                                           CommandStats* stats = nullptr) {
  const AttnInputTensors t = upload_inputs(b, in);
  Tensor out = b.tensor(in.out_shape(), DType::f32);
  CommandList cmd = b.commands();
  cmd.attention(t.q, t.k, t.v, out, {in.q_pos, in.k_pos, in.q_seq, in.k_seq}, config, t.mask_or_null());
  cmd.submit_and_wait();
  if (stats) *stats = cmd.stats();
  return b.download(out);
}
inline std::vector<float> run_attention_op(Backend& b, const AttnInputs& in, CommandStats* stats = nullptr) {
  return run_attention_op(b, in, in.config, stats);
}

// Random q, k (N(0, qk_scale)) and v (N(0, 1)). Key j is in sequence j % seqs at position
// offset + j / seqs (sequences interleaved in the key list); the tokens of each sequence
// are its last positions (a prefill chunk, or with one token per sequence a decode step).
// One sequence leaves the seq ids empty (the default).
inline AttnInputs random_inputs(std::size_t tokens, std::size_t heads, std::size_t kv_heads, std::size_t keys,
                                std::size_t head_dim, std::size_t seqs, std::uint32_t seed, std::int32_t offset = 0,
                                float qk_scale = 1.0f) {
  AttnInputs in{.tokens = tokens, .heads = heads, .kv_heads = kv_heads, .keys = keys, .head_dim = head_dim};
  in.q = normal(tokens * heads * head_dim, seed, qk_scale);
  in.k = normal(keys * kv_heads * head_dim, seed + 1, qk_scale);
  in.v = normal(keys * kv_heads * head_dim, seed + 2);
  const auto count = [&](std::size_t n, std::size_t s) { return static_cast<std::int32_t>((n + seqs - 1 - s) / seqs); };
  for (std::size_t j = 0; j < keys; ++j) {
    in.k_pos.push_back(offset + static_cast<std::int32_t>(j / seqs));
    if (seqs > 1) in.k_seq.push_back(static_cast<std::int32_t>(j % seqs));
  }
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::size_t s = t % seqs;
    const std::int32_t first = std::max(0, count(keys, s) - count(tokens, s));
    in.q_pos.push_back(offset + first + static_cast<std::int32_t>(t / seqs));
    if (seqs > 1) in.q_seq.push_back(static_cast<std::int32_t>(s));
  }
  return in;
}

}  // namespace vkattn::test
