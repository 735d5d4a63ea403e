#include "llama2c.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <stdexcept>

namespace llama2c {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& field, long long value, const std::string& valid) {
  throw std::runtime_error(what + ": " + field + " = " + std::to_string(value) + "; valid: " + valid);
}

void check_range(const std::string& what, const char* field, long long value, long long lo, long long hi) {
  if (value < lo || value > hi) {
    // Appended piecewise: GCC 12 flags a chain of string operator+ here (-Wrestrict false positive).
    std::string valid = "[";
    valid.append(std::to_string(lo)).append(", ").append(std::to_string(hi)).append("]");
    fail(what, field, value, valid);
  }
}

// Sizes in floats of each tensor, in file order, computed in 64 bits: with the caps of
// validate_config the largest product (256 layers x 65536 x 16384) is far below 2^63.
struct Layout {
  std::uint64_t embed, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls;
  std::uint64_t total() const {
    return embed + rms_att + wq + wk + wv + wo + rms_ffn + w1 + w2 + w3 + rms_final + freq_cis + wcls;
  }
};

Layout layout_of(const Config& c) {
  const std::uint64_t dim = static_cast<std::uint64_t>(c.dim), hidden = static_cast<std::uint64_t>(c.hidden_dim),
                      layers = static_cast<std::uint64_t>(c.n_layers), vocab = static_cast<std::uint64_t>(c.vocab_size),
                      kv = c.kv_dim(), seq = static_cast<std::uint64_t>(c.seq_len), hs = c.head_size();
  return {vocab * dim,
          layers * dim,
          layers * dim * dim,
          layers * kv * dim,
          layers * kv * dim,
          layers * dim * dim,
          layers * dim,
          layers * hidden * dim,
          layers * dim * hidden,
          layers * hidden * dim,
          dim,
          2 * seq * (hs / 2),
          c.shared_classifier ? 0 : vocab * dim};
}

class Reader {
 public:
  Reader(const std::string& path, const std::string& what) : in_(path, std::ios::binary), what_(what) {
    if (!in_) throw std::runtime_error(what + ": cannot open file");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<std::uint64_t>(in_.tellg());
    in_.seekg(0);
  }
  std::uint64_t size() const { return size_; }
  std::uint64_t left() const { return size_ - pos_; }
  // Reads |n| bytes for |field|, failing (naming it) if the file ends first.
  void read(void* dst, std::uint64_t n, const std::string& field) {
    if (n > left())
      throw std::runtime_error(what_ + ": file truncated reading " + field + " (needs " + std::to_string(n) +
                               " bytes at offset " + std::to_string(pos_) + ", file has " + std::to_string(size_) + ")");
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in_) throw std::runtime_error(what_ + ": read error in " + field);
    pos_ += n;
  }
  std::int32_t i32(const std::string& field) {
    std::int32_t v = 0;
    read(&v, 4, field);
    return v;
  }
  std::vector<float> floats(std::uint64_t n, const std::string& field) {
    std::vector<float> v(static_cast<std::size_t>(n));
    read(v.data(), n * 4, field);
    return v;
  }

 private:
  std::ifstream in_;
  std::string what_;
  std::uint64_t size_ = 0, pos_ = 0;
};

void write_floats(std::ofstream& out, const std::vector<float>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

void matmul(float* out, const float* x, const float* w, std::size_t n, std::size_t d) {
  // out[d] = W[d, n] x[n], W row-major as run.c stores it.
  for (std::size_t i = 0; i < d; ++i) {
    const float* row = w + i * n;
    float s = 0.0f;
    for (std::size_t j = 0; j < n; ++j) s += row[j] * x[j];
    out[i] = s;
  }
}

void rmsnorm(float* out, const float* x, const float* w, std::size_t n) {
  float ss = 0.0f;
  for (std::size_t j = 0; j < n; ++j) ss += x[j] * x[j];
  ss = 1.0f / std::sqrt(ss / static_cast<float>(n) + 1e-5f);
  for (std::size_t j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

}  // namespace

void validate_config(const Config& c, const std::string& what) {
  check_range(what, "dim", c.dim, 1, 16384);
  check_range(what, "hidden_dim", c.hidden_dim, 1, 65536);
  check_range(what, "n_layers", c.n_layers, 1, 256);
  check_range(what, "n_heads", c.n_heads, 1, c.dim);
  check_range(what, "n_kv_heads", c.n_kv_heads, 1, c.n_heads);
  check_range(what, "vocab_size", c.vocab_size, 1, 1000000);
  check_range(what, "seq_len", c.seq_len, 1, 1 << 20);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(what, "n_heads", c.n_heads, "a multiple of n_kv_heads = " + std::to_string(c.n_kv_heads));
  if (c.dim % c.n_heads != 0) fail(what, "dim", c.dim, "a multiple of n_heads = " + std::to_string(c.n_heads));
  const long long hs = c.dim / c.n_heads;
  if (hs % 2 != 0 || hs > static_cast<long long>(vkattn::kMaxAttentionHeadDim))
    fail(what, "head_size (dim / n_heads)", hs, "even, <= " + std::to_string(vkattn::kMaxAttentionHeadDim));
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::string what = "checkpoint " + path;
  Reader r(path, what);
  Checkpoint ck;
  Config& c = ck.config;
  c.dim = r.i32("header.dim");
  c.hidden_dim = r.i32("header.hidden_dim");
  c.n_layers = r.i32("header.n_layers");
  c.n_heads = r.i32("header.n_heads");
  c.n_kv_heads = r.i32("header.n_kv_heads");
  const std::int32_t vocab = r.i32("header.vocab_size");
  c.seq_len = r.i32("header.seq_len");
  // INT32_MIN has no positive counterpart; range-check it as it is.
  c.shared_classifier = vocab > 0;
  c.vocab_size = vocab == INT32_MIN ? vocab : (vocab < 0 ? -vocab : vocab);
  validate_config(c, what);
  const Layout l = layout_of(c);
  const std::uint64_t want = 28 + 4 * l.total();
  if (r.size() != want)
    throw std::runtime_error(what + ": file size = " + std::to_string(r.size()) + " bytes; the header (dim " +
                             std::to_string(c.dim) + ", hidden_dim " + std::to_string(c.hidden_dim) + ", n_layers " +
                             std::to_string(c.n_layers) + ", vocab_size " + std::to_string(vocab) + ", seq_len " +
                             std::to_string(c.seq_len) + ") needs exactly " + std::to_string(want) +
                             (r.size() < want ? " (truncated)" : " (trailing bytes)"));
  Weights& w = ck.weights;
  w.token_embedding = r.floats(l.embed, "token_embedding");
  w.rms_att = r.floats(l.rms_att, "rms_att");
  w.wq = r.floats(l.wq, "wq");
  w.wk = r.floats(l.wk, "wk");
  w.wv = r.floats(l.wv, "wv");
  w.wo = r.floats(l.wo, "wo");
  w.rms_ffn = r.floats(l.rms_ffn, "rms_ffn");
  w.w1 = r.floats(l.w1, "w1");
  w.w2 = r.floats(l.w2, "w2");
  w.w3 = r.floats(l.w3, "w3");
  w.rms_final = r.floats(l.rms_final, "rms_final");
  w.freq_cis = r.floats(l.freq_cis, "freq_cis");
  w.wcls = r.floats(l.wcls, "wcls");
  return ck;
}

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  const Config& c = ck.config;
  const std::int32_t header[7] = {
      c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.shared_classifier ? c.vocab_size : -c.vocab_size, c.seq_len};
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  const Weights& w = ck.weights;
  for (const auto* v : {&w.token_embedding, &w.rms_att, &w.wq, &w.wk, &w.wv, &w.wo, &w.rms_ffn, &w.w1, &w.w2, &w.w3, &w.rms_final,
                        &w.freq_cis, &w.wcls})
    write_floats(out, *v);
  if (!out) throw std::runtime_error("write failed: " + path);
}

Checkpoint random_checkpoint(const Config& c, std::uint32_t seed, float stddev) {
  validate_config(c, "random checkpoint");
  const Layout l = layout_of(c);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  auto draw = [&](std::uint64_t n, float mean) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = mean + dist(rng);
    return v;
  };
  Checkpoint ck{c, {}};
  Weights& w = ck.weights;
  w.token_embedding = draw(l.embed, 0.0f);
  w.rms_att = draw(l.rms_att, 1.0f);
  w.wq = draw(l.wq, 0.0f);
  w.wk = draw(l.wk, 0.0f);
  w.wv = draw(l.wv, 0.0f);
  w.wo = draw(l.wo, 0.0f);
  w.rms_ffn = draw(l.rms_ffn, 1.0f);
  w.w1 = draw(l.w1, 0.0f);
  w.w2 = draw(l.w2, 0.0f);
  w.w3 = draw(l.w3, 0.0f);
  w.rms_final = draw(l.rms_final, 1.0f);
  w.freq_cis = std::vector<float>(static_cast<std::size_t>(l.freq_cis), 0.0f);
  w.wcls = draw(l.wcls, 0.0f);
  return ck;
}

namespace {
std::string model_dir() {
  if (const char* dir = std::getenv("VKATTN_MODEL_DIR"); dir && *dir) return dir;
  return VKATTN_MODEL_DIR;
}
}  // namespace

std::string default_model_path() { return model_dir() + "/kjv-tiny.bin"; }
std::string default_tokenizer_path() { return model_dir() + "/kjv-tokenizer.bin"; }

std::string model_path(const std::string& model) { return model.empty() ? default_model_path() : model; }

std::string tokenizer_path(const std::string& model, const std::string& tokenizer) {
  if (!tokenizer.empty()) return tokenizer;
  if (model.empty()) return default_tokenizer_path();
  const auto slash = model.find_last_of('/');
  return (slash == std::string::npos ? std::string() : model.substr(0, slash + 1)) + "tokenizer.bin";
}

// ---- Tokenizer ----

Tokenizer::Tokenizer(std::vector<std::string> vocab, std::vector<float> scores)
    : vocab_(std::move(vocab)), scores_(std::move(scores)) {
  if (scores_.size() != vocab_.size()) throw std::runtime_error("tokenizer: scores and vocab differ in size");
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    index_.emplace(vocab_[i], static_cast<int>(i));  // first id wins for duplicate pieces
    max_token_length_ = std::max(max_token_length_, vocab_[i].size());
  }
}

Tokenizer Tokenizer::load(const std::string& path, std::int32_t vocab_size) {
  const std::string what = "tokenizer " + path;
  check_range(what, "vocab_size", vocab_size, 1, 1000000);
  Reader r(path, what);
  const std::int32_t max_len = r.i32("max_token_length");
  check_range(what, "max_token_length", max_len, 1, 65536);
  // Each token needs at least 8 bytes (score, len): reject a too-short file before reserving.
  if (r.left() < 8ull * static_cast<std::uint64_t>(vocab_size))
    throw std::runtime_error(what + ": file truncated: " + std::to_string(r.size()) +
                             " bytes cannot hold vocab_size = " + std::to_string(vocab_size) + " tokens");
  std::vector<std::string> vocab;
  std::vector<float> scores;
  vocab.reserve(static_cast<std::size_t>(vocab_size));
  scores.reserve(static_cast<std::size_t>(vocab_size));
  for (std::int32_t i = 0; i < vocab_size; ++i) {
    const std::string field = "token " + std::to_string(i);
    float score = 0.0f;
    r.read(&score, 4, field + " score");
    if (!std::isfinite(score)) throw std::runtime_error(what + ": " + field + " score is not finite");
    const std::int32_t len = r.i32(field + " len");
    check_range(what, (field + " len").c_str(), len, 0, max_len);
    std::string s(static_cast<std::size_t>(len), '\0');
    r.read(s.data(), static_cast<std::uint64_t>(len), field + " bytes");
    vocab.push_back(std::move(s));
    scores.push_back(score);
  }
  if (r.left() != 0)
    throw std::runtime_error(what + ": " + std::to_string(r.left()) + " trailing bytes after vocab_size = " +
                             std::to_string(vocab_size) + " tokens (tokenizer for another vocab?)");
  Tokenizer t(std::move(vocab), std::move(scores));
  t.max_token_length_ = static_cast<std::size_t>(max_len);
  return t;
}

void Tokenizer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  const auto max_len = static_cast<std::int32_t>(max_token_length_);
  out.write(reinterpret_cast<const char*>(&max_len), 4);
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    const auto len = static_cast<std::int32_t>(vocab_[i].size());
    out.write(reinterpret_cast<const char*>(&scores_[i]), 4);
    out.write(reinterpret_cast<const char*>(&len), 4);
    out.write(vocab_[i].data(), len);
  }
  if (!out) throw std::runtime_error("write failed: " + path);
}

int Tokenizer::lookup(const std::string& s) const {
  const auto it = index_.find(s);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(const std::string& text, bool bos, bool eos) const {
  std::vector<int> tokens;
  if (bos) tokens.push_back(kBos);
  // sentencepiece's add_dummy_prefix; run.c assumes " " exists, we skip it when it does not.
  if (!text.empty()) {
    if (const int space = lookup(" "); space >= 0) tokens.push_back(space);
  }
  auto push_bytes = [&](const std::string& bytes) {
    for (unsigned char b : bytes) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const int id = lookup(name);
      tokens.push_back(id >= 0 ? id : 0);  // 0 = <unk> when the vocab lacks byte fallback
    }
  };
  // Split into UTF-8 code points (a lead byte and up to 3 continuation bytes).
  for (std::size_t i = 0; i < text.size();) {
    std::size_t j = i + 1;
    while (j < text.size() && j - i < 4 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    const std::string cp = text.substr(i, j - i);
    if (const int id = lookup(cp); id >= 0)
      tokens.push_back(id);
    else
      push_bytes(cp);
    i = j;
  }
  // Merge the adjacent pair with the best score until none is in the vocab. BOS is never
  // merged (run.c merges it too, but "<s>" never prefixes a vocab entry in practice).
  const std::size_t first = bos ? 1 : 0;
  for (;;) {
    float best = -1e10f;
    int best_id = -1;
    std::size_t best_at = 0;
    for (std::size_t i = first; i + 1 < tokens.size(); ++i) {
      const int id = lookup(vocab_[static_cast<std::size_t>(tokens[i])] + vocab_[static_cast<std::size_t>(tokens[i + 1])]);
      if (id >= 0 && scores_[static_cast<std::size_t>(id)] > best) {
        best = scores_[static_cast<std::size_t>(id)];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_at] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  if (eos) tokens.push_back(kEos);
  return tokens;
}

std::string Tokenizer::decode_piece(int prev, int token) const {
  std::string piece = vocab_.at(static_cast<std::size_t>(token));
  if (prev == kBos && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  unsigned int byte = 0;
  char tail = 0;
  // Exactly "<0xXX>": sscanf alone would also accept "<0x4" and similar.
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X%c", &byte, &tail) == 2 && tail == '>')
    return std::string(1, static_cast<char>(byte));
  return piece;
}

std::string Tokenizer::decode(const std::vector<int>& tokens) const {
  std::string out;
  int prev = -1;
  for (int t : tokens) {
    if (t != kBos && t != kEos) out += decode_piece(prev, t);
    prev = t;
  }
  return out;
}

Tokenizer synthetic_tokenizer() {
  std::vector<std::string> vocab = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab.emplace_back(name);
  }
  std::vector<float> scores(vocab.size(), 0.0f);
  for (char ch = ' '; ch <= '~'; ++ch) {
    vocab.emplace_back(1, ch);
    scores.push_back(-1000.0f);  // single characters are never the result of a merge
  }
  const char* merges[] = {" t", "he", " the", "in",  "an", "er", " a", "on", "re", "at", "en", "nd", " s", " o",
                          "ed", "is", " w",   "ing", "ou", " h", "it", " b", " c", " f", "or", "es", "ll", " th"};
  float score = 0.0f;
  for (const char* m : merges) {
    vocab.emplace_back(m);
    scores.push_back(score -= 1.0f);
  }
  return Tokenizer(std::move(vocab), std::move(scores));
}

// ---- Model ----

Model::Model(const Checkpoint& ck, vkattn::Backend& backend, std::size_t capacity, vkattn::DType cache_dtype)
    : ck_(ck), backend_(backend), capacity_(capacity ? capacity : static_cast<std::size_t>(ck.config.seq_len)) {
  const Config& c = ck.config;
  const std::size_t H = static_cast<std::size_t>(c.n_heads), Hk = static_cast<std::size_t>(c.n_kv_heads), hs = c.head_size(),
                    dim = static_cast<std::size_t>(c.dim);
  for (int l = 0; l < c.n_layers; ++l)
    caches_.push_back(backend.kv_cache({.n_kv_heads = Hk, .head_dim = hs, .capacity = capacity_, .dtype = cache_dtype}));
  queries_.resize(static_cast<std::size_t>(c.n_layers));
  // Reused every token: the shapes never change in one-token decode.
  q_ = backend.tensor({1, H, hs}, vkattn::DType::f32);
  k_ = backend.tensor({1, Hk, hs}, vkattn::DType::f32);
  v_ = backend.tensor({1, Hk, hs}, vkattn::DType::f32);
  scores_ = backend.tensor({1, H, capacity_}, vkattn::DType::f32);
  out_ = backend.tensor({1, H, hs}, vkattn::DType::f32);
  x_.resize(dim);
  xb_.resize(dim);
  xb2_.resize(dim);
  hb_.resize(static_cast<std::size_t>(c.hidden_dim));
  hb2_.resize(static_cast<std::size_t>(c.hidden_dim));
  q_host_.resize(dim);
  k_host_.resize(c.kv_dim());
  v_host_.resize(c.kv_dim());
  logits_.resize(static_cast<std::size_t>(c.vocab_size));
}

const std::vector<float>& Model::forward(int token, std::int32_t pos) {
  const Config& c = ck_.config;
  const Weights& w = ck_.weights;
  if (token < 0 || token >= c.vocab_size) throw std::runtime_error("forward: token " + std::to_string(token) + " out of range");
  const std::size_t dim = static_cast<std::size_t>(c.dim), kv = c.kv_dim(), hidden = static_cast<std::size_t>(c.hidden_dim);
  std::copy_n(w.token_embedding.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(token) * dim), dim, x_.begin());
  const std::int32_t positions[1] = {pos};
  // llama2.c: interleaved pairs, base 10000, whole head rotated.
  const vkattn::RopeConfig rope{.layout = vkattn::RopeLayout::interleaved, .base = 10000.0};
  // A window equal to the capacity is a no-op while the ring has not wrapped and exactly
  // what the ring holds once it has.
  vkattn::AttentionConfig attn;
  attn.window = static_cast<std::uint32_t>(capacity_);
  for (std::size_t l = 0; l < static_cast<std::size_t>(c.n_layers); ++l) {
    rmsnorm(xb_.data(), x_.data(), w.rms_att.data() + l * dim, dim);
    matmul(q_host_.data(), xb_.data(), w.wq.data() + l * dim * dim, dim, dim);
    matmul(k_host_.data(), xb_.data(), w.wk.data() + l * kv * dim, dim, kv);
    matmul(v_host_.data(), xb_.data(), w.wv.data() + l * kv * dim, dim, kv);

    const auto t0 = std::chrono::steady_clock::now();
    backend_.upload(q_, q_host_);
    backend_.upload(k_, k_host_);
    backend_.upload(v_, v_host_);
    // Each layer's step is recorded once and replayed for every later token: only the
    // position changes (set_tokens), the command buffer stays.
    const auto t_record = std::chrono::steady_clock::now();
    if (steps_.size() <= l) {
      steps_.push_back(backend_.commands({.timestamps = backend_.limits().timestamps}));
      vkattn::CommandList& cmd = steps_.back();
      cmd.rope(q_, k_, positions, rope);
      cmd.kv_append(caches_[l], k_, v_, positions);
      const vkattn::AttentionTokens tokens{.q_positions = positions};
      if (attention_op_) {
        vkattn::AttentionConfig op = attn;
        op.path = *attention_op_;
        cmd.attention(q_, caches_[l], out_, tokens, op);
      } else {
        cmd.attn_scores(q_, caches_[l], scores_, tokens, attn);
        cmd.attn_softmax(scores_, scores_, attn);
        cmd.attn_weighted_sum(scores_, caches_[l], out_, tokens);
      }
    } else {
      steps_[l].set_tokens(positions);
    }
    record_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_record).count();
    steps_[l].submit_and_wait();
    for (const vkattn::OpTiming& t : steps_[l].timings()) device_seconds_ += t.ms * 1e-3;
    const std::vector<float> att = backend_.download(out_);
    if (static_cast<int>(l) == probe_layer_) probs_ = backend_.download(scores_);
    if (keep_queries_) queries_[l] = backend_.download(q_);
    vkattn_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    matmul(xb2_.data(), att.data(), w.wo.data() + l * dim * dim, dim, dim);
    for (std::size_t i = 0; i < dim; ++i) x_[i] += xb2_[i];
    rmsnorm(xb_.data(), x_.data(), w.rms_ffn.data() + l * dim, dim);
    matmul(hb_.data(), xb_.data(), w.w1.data() + l * dim * hidden, dim, hidden);
    matmul(hb2_.data(), xb_.data(), w.w3.data() + l * dim * hidden, dim, hidden);
    for (std::size_t i = 0; i < hidden; ++i) hb_[i] = hb_[i] / (1.0f + std::exp(-hb_[i])) * hb2_[i];  // SwiGLU
    matmul(xb_.data(), hb_.data(), w.w2.data() + l * dim * hidden, hidden, dim);
    for (std::size_t i = 0; i < dim; ++i) x_[i] += xb_[i];
  }
  rmsnorm(x_.data(), x_.data(), w.rms_final.data(), dim);
  matmul(logits_.data(), x_.data(), ck_.classifier().data(), dim, static_cast<std::size_t>(c.vocab_size));
  return logits_;
}

void Model::use_attention_op(std::optional<vkattn::AttentionPath> path) {
  if (path && probe_layer_ >= 0)
    throw std::invalid_argument("use_attention_op: probabilities are kept (keep_probabilities); valid: none while they are");
  attention_op_ = path;
}

void Model::keep_probabilities(int layer) {
  if (layer < -1 || layer >= ck_.config.n_layers)
    throw std::invalid_argument("keep_probabilities: layer = " + std::to_string(layer) + "; valid: -1 (none) or [0, " +
                                std::to_string(ck_.config.n_layers) + ")");
  if (layer >= 0 && attention_op_)
    throw std::invalid_argument("keep_probabilities: attention runs as one op (use_attention_op), which keeps none");
  probe_layer_ = layer;
  probs_.clear();
}

// ---- Sampling ----

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

int Sampler::sample(std::vector<float> logits) {
  if (temperature_ <= 0.0f) return argmax(logits);
  // (x - max) / T rather than x / T - max / T: a tiny T would make both terms infinite,
  // and their difference NaN.
  const float mx = *std::max_element(logits.begin(), logits.end());
  float sum = 0.0f;
  for (auto& x : logits) sum += (x = std::exp((x - mx) / temperature_));
  for (auto& x : logits) x /= sum;
  const float coin = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng_);
  std::vector<int> order;
  if (top_p_ > 0.0f && top_p_ < 1.0f) {
    // run.c: tokens below (1 - p) / (n - 1) cannot be in the nucleus; drop them before sorting.
    const float cutoff = (1.0f - top_p_) / static_cast<float>(std::max<std::size_t>(logits.size() - 1, 1));
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] >= cutoff) order.push_back(static_cast<int>(i));
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)]; });
    float cum = 0.0f;
    std::size_t last = order.size();
    for (std::size_t i = 0; i < order.size(); ++i) {
      cum += logits[static_cast<std::size_t>(order[i])];
      if (cum > top_p_) {
        last = i + 1;
        break;
      }
    }
    order.resize(last);
    float acc = 0.0f, r = coin * cum;
    for (int id : order)
      if ((acc += logits[static_cast<std::size_t>(id)]) > r) return id;
    return order.empty() ? argmax(logits) : order.back();
  }
  float acc = 0.0f;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if ((acc += logits[i]) > coin) return static_cast<int>(i);
  return static_cast<int>(logits.size() - 1);
}

}  // namespace llama2c
