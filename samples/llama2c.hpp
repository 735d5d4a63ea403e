// llama2.c models (Karpathy's run.c format) on vkattn: checkpoint and tokenizer loaders,
// a per-token forward pass whose attention path (RoPE, KV cache, attention) runs through a
// vkattn::Backend, and run.c's samplers. The matmuls stay on the CPU as plain loops: the
// point of the sample is to exercise vkattn's ops on a real model, not to be fast.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "vkattn/vkattn.hpp"

namespace llama2c {

// The 7-int32 header. vocab_size is stored negative in the file when the classifier has
// its own weights; here it is always positive and shared_classifier says which.
struct Config {
  std::int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  std::size_t head_size() const { return static_cast<std::size_t>(dim / n_heads); }
  std::size_t kv_dim() const {
    return static_cast<std::size_t>(dim) * static_cast<std::size_t>(n_kv_heads) / static_cast<std::size_t>(n_heads);
  }
};

// Weight matrices are row-major [out, in] per layer, as run.c's matmul reads them.
struct Weights {
  std::vector<float> token_embedding;  // [vocab, dim]
  std::vector<float> rms_att;          // [layers, dim]
  std::vector<float> wq;               // [layers, dim, dim]
  std::vector<float> wk;               // [layers, kv_dim, dim]
  std::vector<float> wv;               // [layers, kv_dim, dim]
  std::vector<float> wo;               // [layers, dim, dim]
  std::vector<float> rms_ffn;          // [layers, dim]
  std::vector<float> w1;               // [layers, hidden, dim]
  std::vector<float> w2;               // [layers, dim, hidden]
  std::vector<float> w3;               // [layers, hidden, dim]
  std::vector<float> rms_final;        // [dim]
  std::vector<float> freq_cis;         // legacy RoPE tables (real then imag); unused, kept to write files back
  std::vector<float> wcls;             // [vocab, dim]; empty when shared with token_embedding
};

struct Checkpoint {
  Config config;
  Weights weights;
  const std::vector<float>& classifier() const { return config.shared_classifier ? weights.token_embedding : weights.wcls; }
};

// Throws std::runtime_error naming the file and the bad field. The header is validated and
// the exact file size it implies checked before any weight buffer is allocated.
Checkpoint load_checkpoint(const std::string& path);
// Validates a header alone (also used by load_checkpoint); throws naming the field.
void validate_config(const Config& config, const std::string& what);
// Writes |checkpoint| in the llama2.c format (tests and the random-model helper).
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Weights drawn from N(0, stddev) with |seed|; RMSNorm weights around 1 so activations stay sane.
Checkpoint random_checkpoint(const Config& config, std::uint32_t seed, float stddev = 0.1f);

// The model the repository ships (models/, trained by tools/train_tiny_model.py): its
// checkpoint and tokenizer paths, under $VKATTN_MODEL_DIR when that is set.
std::string default_model_path();
std::string default_tokenizer_path();
// What the samples load for --model |model| and --tokenizer |tokenizer| (either may be
// empty): the shipped pair when both are, else tokenizer.bin beside the model.
std::string model_path(const std::string& model);
std::string tokenizer_path(const std::string& model, const std::string& tokenizer);

inline constexpr int kBos = 1;
inline constexpr int kEos = 2;

class Tokenizer {
 public:
  Tokenizer() = default;
  Tokenizer(std::vector<std::string> vocab, std::vector<float> scores);
  // Reads tokenizer.bin, which holds exactly |vocab_size| tokens (the model's vocab).
  static Tokenizer load(const std::string& path, std::int32_t vocab_size);
  void save(const std::string& path) const;

  // run.c's encode: optional BOS, a dummy-prefix " " (if the vocab has it), UTF-8 code
  // points or their <0xXX> byte tokens, then greedy merges of the best-scoring pair.
  std::vector<int> encode(const std::string& text, bool bos, bool eos) const;
  // The text of |token| following |prev|: byte tokens become their byte, and the leading
  // space after BOS is dropped (sentencepiece).
  std::string decode_piece(int prev, int token) const;
  // The concatenated pieces; BOS/EOS produce nothing.
  std::string decode(const std::vector<int>& tokens) const;
  std::size_t size() const { return vocab_.size(); }
  const std::string& piece(int token) const { return vocab_.at(static_cast<std::size_t>(token)); }

 private:
  int lookup(const std::string& s) const;
  std::vector<std::string> vocab_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> index_;
  std::size_t max_token_length_ = 1;
};

// A small vocab for tests and the random-model helper, laid out like Llama's: <unk>, <s>,
// </s>, the 256 byte tokens <0x00>..<0xFF>, every printable ASCII character, then a few
// English merges (earlier merges score higher). Any text round-trips through it.
Tokenizer synthetic_tokenizer();

// One sequence, one token at a time. Q/K/V/O and FFN matmuls on the CPU; RoPE, the per-layer
// KV cache and attention on |backend|. |checkpoint| must outlive the model.
class Model {
 public:
  // capacity: KV slots per layer, 0 = seq_len. Below seq_len the ring wraps and attention
  // uses a sliding window of |capacity|, so every token sees exactly what the ring holds.
  // cache_dtype: f32, f16, q8_0 or q4_0 (the quantized types need head_size % 32 == 0).
  Model(const Checkpoint& checkpoint, vkattn::Backend& backend, std::size_t capacity = 0,
        vkattn::DType cache_dtype = vkattn::DType::f32);
  // Logits for |token| at |pos| (positions must be 0, 1, 2, ... in order).
  const std::vector<float>& forward(int token, std::int32_t pos);
  std::size_t capacity() const { return capacity_; }
  // Wall time spent in vkattn calls (uploads, record, submit, downloads) so far; of it,
  // recording or replaying the layers' steps (host), and their device time from
  // timestamps (0 where the device has none).
  double vkattn_seconds() const { return vkattn_seconds_; }
  double record_seconds() const { return record_seconds_; }
  double device_seconds() const { return device_seconds_; }
  // How attention runs: unset (the default), the three ops recorded separately, which
  // keeps the probabilities readable; set, CommandList::attention with that path (fused
  // kernel, three stages, or the device's choice). keep_probabilities needs it unset.
  void use_attention_op(std::optional<vkattn::AttentionPath> path);
  // From now on each forward keeps |layer|'s attention probabilities, as attn_softmax wrote
  // them: [n_heads, capacity], keys in slot order (slot = position until the ring wraps).
  // -1 (the default) keeps none.
  void keep_probabilities(int layer);
  const std::vector<float>& probabilities() const { return probs_; }
  // Layer |layer|'s KV cache, and the rotated queries of its last forward ([n_heads,
  // head_size]; kept when keep_queries(true) was called).
  const vkattn::KvCache& cache(int layer) const { return caches_.at(static_cast<std::size_t>(layer)); }
  void keep_queries(bool keep) { keep_queries_ = keep; }
  const std::vector<float>& queries(int layer) const { return queries_.at(static_cast<std::size_t>(layer)); }

 private:
  const Checkpoint& ck_;
  vkattn::Backend& backend_;
  std::size_t capacity_;
  std::vector<vkattn::KvCache> caches_;
  vkattn::Tensor q_, k_, v_, scores_, out_;
  std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_host_, k_host_, v_host_, logits_;
  double vkattn_seconds_ = 0.0, record_seconds_ = 0.0, device_seconds_ = 0.0;
  std::vector<vkattn::CommandList> steps_;  // per layer, recorded at the first token
  int probe_layer_ = -1;
  std::optional<vkattn::AttentionPath> attention_op_;
  std::vector<float> probs_;
  bool keep_queries_ = false;
  std::vector<std::vector<float>> queries_;
};

// run.c's sampler: temperature 0 is argmax; otherwise softmax(logits / temperature), then
// top-p (nucleus) when 0 < top_p < 1, else the full distribution.
class Sampler {
 public:
  Sampler(float temperature, float top_p, std::uint64_t seed)
      : temperature_(temperature), top_p_(top_p), rng_(static_cast<std::mt19937::result_type>(seed)) {}
  int sample(std::vector<float> logits);

 private:
  float temperature_, top_p_;
  std::mt19937 rng_;
};

int argmax(const std::vector<float>& v);

}  // namespace llama2c
