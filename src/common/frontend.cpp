// The public Tensor, CommandList and Backend members: argument checks and dtype
// conversion live here once, so both backends only move words and run checked ops. Each
// entry point turns a host allocation failure below it into Error(out_of_memory) naming
// its op: std::bad_alloc never reaches the caller.
#include <cstring>
#include <new>

#include "common/half.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/quant.hpp"
#include "common/shape_math.hpp"
#include "common/tensor_impl.hpp"
#include "common/validate.hpp"
#include "vkattn/backend.hpp"

namespace vkattn {

namespace detail {
TensorImpl::TensorImpl(const void* owner_, Shape shape_, DType dtype_)
    : owner(owner_),
      shape(std::move(shape_)),
      dtype(dtype_),
      numel(detail::numel(shape)),
      words(storage_words(numel, dtype)) {}
TensorImpl::~TensorImpl() = default;
CommandListImpl::~CommandListImpl() = default;
}  // namespace detail

Tensor::Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
Tensor::~Tensor() = default;

static const detail::TensorImpl& live(const std::shared_ptr<detail::TensorImpl>& impl) {
  if (!impl) throw InvalidArgument("tensor", "this", detail::kEmptyTensor, "a tensor made by Backend::tensor");
  return *impl;
}
const Shape& Tensor::shape() const { return live(impl_).shape; }
DType Tensor::dtype() const { return live(impl_).dtype; }
std::size_t Tensor::numel() const { return live(impl_).numel; }
std::size_t Tensor::bytes() const { return live(impl_).words * 4; }

CommandList::CommandList(std::unique_ptr<detail::CommandListImpl> impl) : impl_(std::move(impl)) {}
CommandList::CommandList(CommandList&&) noexcept = default;
CommandList& CommandList::operator=(CommandList&&) noexcept = default;
CommandList::~CommandList() = default;

// The list's implementation; a moved-from list has none.
static detail::CommandListImpl& live(const std::unique_ptr<detail::CommandListImpl>& impl, const char* op) {
  if (!impl) throw InvalidArgument(op, "this", "a moved-from CommandList", "a list made by Backend::commands");
  return *impl;
}

void CommandList::copy(const Tensor& src, Tensor& dst) try {
  auto& impl = live(impl_, "copy");
  const auto& s = detail::check_tensor("copy", "src", src, impl.owner());
  const auto& d = detail::check_tensor("copy", "dst", dst, impl.owner());
  detail::check_copy(*s, *d);
  impl.copy(s, d);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("copy");
}

void CommandList::rope(Tensor& x, std::span<const std::int32_t> positions, const RopeConfig& config) try {
  auto& impl = live(impl_, "rope");
  const auto& t = detail::check_tensor("rope", "x", x, impl.owner());
  RopeConfig checked = detail::check_rope(*t, nullptr, positions, config);
  impl.rope(t, nullptr, std::vector<std::int32_t>(positions.begin(), positions.end()), checked);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("rope");
}

void CommandList::rope(Tensor& q, Tensor& k, std::span<const std::int32_t> positions, const RopeConfig& config) try {
  auto& impl = live(impl_, "rope");
  const auto& tq = detail::check_tensor("rope", "q", q, impl.owner());
  const auto& tk = detail::check_tensor("rope", "k", k, impl.owner());
  RopeConfig checked = detail::check_rope(*tq, tk.get(), positions, config);
  impl.rope(tq, tk, std::vector<std::int32_t>(positions.begin(), positions.end()), checked);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("rope");
}

void CommandList::attn_scores(const Tensor& q, const Tensor& k, Tensor& scores, const AttentionTokens& tokens,
                              const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attn_scores";
  auto& impl = live(impl_, op);
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& tk = detail::check_tensor(op, "k", k, impl.owner());
  const auto& ts = detail::check_tensor(op, "scores", scores, impl.owner());
  std::shared_ptr<detail::TensorImpl> tm;
  if (mask) tm = detail::check_tensor(op, "mask", *mask, impl.owner());
  detail::ScoresParams params = detail::check_attn_scores(*tq, *tk, *ts, tm.get(), tokens, config);
  detail::check_no_sinks(config);
  impl.attn_scores(tq, tk, ts, tm, params);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_scores");
}

void CommandList::attn_softmax(const Tensor& scores, Tensor& probs, const AttentionConfig& config) try {
  auto& impl = live(impl_, "attn_softmax");
  const auto& ts = detail::check_tensor("attn_softmax", "scores", scores, impl.owner());
  const auto& tp = detail::check_tensor("attn_softmax", "probs", probs, impl.owner());
  impl.attn_softmax(ts, tp, detail::check_attn_softmax(*ts, *tp, config));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_softmax");
}

void CommandList::attn_weighted_sum(const Tensor& probs, const Tensor& v, Tensor& out) try {
  const char* op = "attn_weighted_sum";
  auto& impl = live(impl_, op);
  const auto& tp = detail::check_tensor(op, "probs", probs, impl.owner());
  const auto& tv = detail::check_tensor(op, "v", v, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  detail::check_attn_weighted_sum(*tp, *tv, *to);
  impl.attn_weighted_sum(tp, tv, to);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_weighted_sum");
}

static const std::shared_ptr<detail::KvCacheImpl>& check_cache(const char* op, const KvCache& cache, const void* owner) {
  if (!cache.valid()) throw InvalidArgument(op, "cache", detail::kEmptyCache, "a cache made by Backend::kv_cache");
  if (cache.impl()->owner != owner) {
    throw InvalidArgument(op, "cache", "a cache of another backend", "a cache made by the backend of this command list");
  }
  return cache.impl();
}

void CommandList::kv_append(KvCache& cache, const Tensor& k, const Tensor& v, std::span<const std::int32_t> positions,
                            std::span<const std::int32_t> seq_ids, const KvAppendOptions& options) try {
  const char* op = "kv_append";
  auto& impl = live(impl_, op);
  const auto& c = check_cache(op, cache, impl.owner());
  const auto& tk = detail::check_tensor(op, "k", k, impl.owner());
  const auto& tv = detail::check_tensor(op, "v", v, impl.owner());
  detail::check_kv_append(*c, *tk, *tv, positions, seq_ids);
  const detail::KvCacheImpl::AppendPlan plan = c->plan_append(positions, seq_ids, options);
  impl.kv_append(c, tk, tv, plan.dst_rows);
  c->apply_append(positions, seq_ids, plan);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_append");
}

void CommandList::kv_copy_sequence(KvCache& cache, std::size_t src, std::size_t dst) try {
  const char* op = "kv_copy_sequence";
  auto& impl = live(impl_, op);
  const auto& c = check_cache(op, cache, impl.owner());
  for (auto [name, s] : {std::pair{"src", src}, std::pair{"dst", dst}}) {
    if (s >= c->config.n_seqs) {
      throw InvalidArgument(op, name, std::to_string(s), "[0, n_seqs = " + std::to_string(c->config.n_seqs) + ")");
    }
  }
  if (src == dst) return;
  impl.kv_copy_sequence(c, src, dst);
  c->copy_sequence(src, dst);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_copy_sequence");
}

void CommandList::attn_scores(const Tensor& q, const KvCache& cache, Tensor& scores, const AttentionTokens& tokens,
                              const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attn_scores";
  auto& impl = live(impl_, op);
  const auto& c = check_cache(op, cache, impl.owner());
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& ts = detail::check_tensor(op, "scores", scores, impl.owner());
  std::shared_ptr<detail::TensorImpl> tm;
  if (mask) tm = detail::check_tensor(op, "mask", *mask, impl.owner());
  detail::ScoresParams params = detail::check_attn_scores_cache(*tq, *c, *ts, tm.get(), tokens, config);
  detail::check_no_sinks(config);
  impl.attn_scores_cache(tq, c, ts, tm, params);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_scores");
}

void CommandList::attn_weighted_sum(const Tensor& probs, const KvCache& cache, Tensor& out,
                                    const AttentionTokens& tokens) try {
  const char* op = "attn_weighted_sum";
  auto& impl = live(impl_, op);
  const auto& c = check_cache(op, cache, impl.owner());
  const auto& tp = detail::check_tensor(op, "probs", probs, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  impl.attn_weighted_sum_cache(tp, c, to, detail::check_attn_weighted_sum_cache(*tp, *c, *to, tokens));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_weighted_sum");
}

void CommandList::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                            const AttentionTokens& tokens, const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attention";
  auto& impl = live(impl_, op);
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& tk = detail::check_tensor(op, "k", k, impl.owner());
  const auto& tv = detail::check_tensor(op, "v", v, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  std::shared_ptr<detail::TensorImpl> tm;
  if (mask) tm = detail::check_tensor(op, "mask", *mask, impl.owner());
  detail::AttentionArgs a = detail::check_attention(*tq, *tk, *tv, *to, tm.get(), tokens, config);
  impl.attention(tq, tk, tv, to, tm, a.scores, std::move(a.sinks), a.path);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attention");
}

void CommandList::attention(const Tensor& q, const KvCache& cache, Tensor& out, const AttentionTokens& tokens,
                            const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attention";
  auto& impl = live(impl_, op);
  const auto& c = check_cache(op, cache, impl.owner());
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  std::shared_ptr<detail::TensorImpl> tm;
  if (mask) tm = detail::check_tensor(op, "mask", *mask, impl.owner());
  detail::AttentionArgs a = detail::check_attention_cache(*tq, *c, *to, tm.get(), tokens, config);
  impl.attention_cache(tq, c, to, tm, a.scores, std::move(a.sinks), a.path);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attention");
}

void CommandList::submit_and_wait() try {
  live(impl_, "submit_and_wait").submit_and_wait();
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("submit_and_wait");
}

std::vector<OpTiming> CommandList::timings() const try {
  return live(impl_, "timings").timings();
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("timings");
}

CommandStats CommandList::stats() const { return live(impl_, "stats").stats(); }

Backend::~Backend() = default;

Tensor Backend::tensor(const Shape& shape, DType dtype) try {
  detail::check_new_tensor("tensor", shape, dtype);
  return Tensor(make_tensor(shape, dtype));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("tensor");
}

KvCache Backend::kv_cache(const KvCacheConfig& config) try {
  const Shape shape = detail::check_kv_cache_config(config);
  Tensor k, v;
  try {
    k = tensor(shape, config.dtype);
    v = tensor(shape, config.dtype);
  } catch (const Error& e) {
    throw Error(e.code(), "K and V of shape " + detail::shape_string(shape) + ": " + e.message(), e.call(),
                e.vk_result(), "kv_cache");
  }
  return KvCache(std::make_shared<detail::KvCacheImpl>(owner_tag(), config, k.impl(), v.impl()));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_cache");
}

static void check_upload(const char* op, const Tensor& t, const void* owner, std::size_t n,
                         bool want_int) {
  const auto& impl = detail::check_tensor(op, "tensor", t, owner);
  const bool is_int = impl->dtype == DType::i32;
  if (is_int != want_int) {
    throw InvalidArgument(op, "tensor.dtype", to_string(impl->dtype),
                          want_int ? "i32 for int32 data" : "f32 or f16 for float data");
  }
  if (n != impl->numel) {
    throw InvalidArgument(op, "data.size()", std::to_string(n),
                          "tensor.numel() = " + std::to_string(impl->numel));
  }
}

void Backend::upload(Tensor& tensor, std::span<const float> data) try {
  check_upload("upload", tensor, owner_tag(), data.size(), false);
  auto& impl = *tensor.impl();
  std::vector<std::uint32_t> words(impl.words, 0);
  if (impl.dtype == DType::f32) {
    std::memcpy(words.data(), data.data(), data.size_bytes());
  } else if (detail::is_quantized(impl.dtype)) {
    for (std::size_t b = 0; b < data.size() / detail::kQuantBlock; ++b) {
      detail::store_block(impl.dtype, data.subspan(b * detail::kQuantBlock).first<detail::kQuantBlock>(), words,
                          impl.numel, b);
    }
  } else {
    for (std::size_t i = 0; i < data.size(); ++i) {
      words[i / 2] |= std::uint32_t{detail::float_to_half(data[i])} << (16 * (i % 2));
    }
  }
  write_words(impl, words);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("upload");
}

void Backend::upload(Tensor& tensor, std::span<const std::int32_t> data) try {
  check_upload("upload", tensor, owner_tag(), data.size(), true);
  std::vector<std::uint32_t> words(data.size());
  std::memcpy(words.data(), data.data(), data.size_bytes());
  write_words(*tensor.impl(), words);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("upload");
}

std::vector<float> Backend::download(const Tensor& tensor) try {
  const auto& impl = detail::check_tensor("download", "tensor", tensor, owner_tag());
  if (impl->dtype == DType::i32) {
    throw InvalidArgument("download", "tensor.dtype", "i32", "f32 or f16 (use download_i32)");
  }
  std::vector<std::uint32_t> words = read_words(*impl);
  std::vector<float> out(impl->numel);
  if (impl->dtype == DType::f32) {
    std::memcpy(out.data(), words.data(), out.size() * sizeof(float));
  } else if (detail::is_quantized(impl->dtype)) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::dequantize(impl->dtype, words, impl->numel, i);
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = detail::half_to_float(static_cast<std::uint16_t>(words[i / 2] >> (16 * (i % 2))));
    }
  }
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("download");
}

void Backend::upload_raw(Tensor& tensor, std::span<const std::uint8_t> bytes) try {
  const auto& impl = detail::check_tensor("upload_raw", "tensor", tensor, owner_tag());
  if (bytes.size() != impl->words * 4) {
    throw InvalidArgument("upload_raw", "bytes.size()", std::to_string(bytes.size()),
                          "tensor.bytes() = " + std::to_string(impl->words * 4));
  }
  std::vector<std::uint32_t> words(impl->words);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  write_words(*impl, words);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("upload_raw");
}

std::vector<std::uint8_t> Backend::download_raw(const Tensor& tensor) try {
  const auto& impl = detail::check_tensor("download_raw", "tensor", tensor, owner_tag());
  const std::vector<std::uint32_t> words = read_words(*impl);
  std::vector<std::uint8_t> bytes(words.size() * 4);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("download_raw");
}

std::vector<std::int32_t> Backend::download_i32(const Tensor& tensor) try {
  const auto& impl = detail::check_tensor("download_i32", "tensor", tensor, owner_tag());
  if (impl->dtype != DType::i32) {
    throw InvalidArgument("download_i32", "tensor.dtype", to_string(impl->dtype), "i32");
  }
  std::vector<std::uint32_t> words = read_words(*impl);
  std::vector<std::int32_t> out(impl->numel);
  std::memcpy(out.data(), words.data(), out.size() * sizeof(std::int32_t));
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("download_i32");
}

}  // namespace vkattn
