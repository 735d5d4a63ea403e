// Backend::save_cache and restore_cache: a KV cache's configuration, bookkeeping and raw K
// and V words in one byte string (little-endian 32- and 64-bit fields):
//   "vkattnKV", u32 format version (1; 2 for a latent cache, whose bytes hold no V words),
//   u32 dtype, u32 rope, u32 v_head_dim (0: head_dim; the word was reserved and 0 before V
//   could differ, so older saves read the same),
//   u64 n_seqs, capacity, n_kv_heads, head_dim, n_sinks,
//   i32 slot positions [n_seqs * capacity], i32 next [n_seqs], i32 oldest [n_seqs],
//   u32 K words, u32 V words (the tensors' storage: docs/kv-cache.md; none when latent).
// A latent save takes its own version so that a library that knows only version 1 refuses
// it by its version rather than by its size.
#include <cstring>

#include "common/kv_cache_impl.hpp"
#include "common/tensor_impl.hpp"
#include "vkattn/backend.hpp"
#include "vkattn/error.hpp"

namespace vkattn {

namespace {

constexpr char kMagic[8] = {'v', 'k', 'a', 't', 't', 'n', 'K', 'V'};
constexpr std::uint32_t kVersion = 1, kLatentVersion = 2;

struct Header {
  char magic[8];
  std::uint32_t version, dtype, rope, v_head_dim;
  std::uint64_t n_seqs, capacity, n_kv_heads, head_dim, n_sinks;
};
static_assert(sizeof(Header) == 64);

Header header_of(const KvCacheConfig& c) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = c.latent ? kLatentVersion : kVersion;
  h.dtype = static_cast<std::uint32_t>(c.dtype);
  h.rope = static_cast<std::uint32_t>(c.rope);
  h.n_seqs = c.n_seqs;
  h.capacity = c.capacity;
  h.n_kv_heads = c.n_kv_heads;
  h.head_dim = c.head_dim;
  h.v_head_dim = detail::value_head_dim(c) != c.head_dim ? static_cast<std::uint32_t>(detail::value_head_dim(c)) : 0;
  h.n_sinks = c.n_sinks;
  return h;
}

const std::shared_ptr<detail::KvCacheImpl>& live_cache(const char* op, const KvCache& cache, const void* owner) {
  if (!cache.valid()) throw InvalidArgument(op, "cache", "an empty KvCache", "a cache made by Backend::kv_cache");
  if (cache.impl()->owner != owner) {
    throw InvalidArgument(op, "cache", "a cache of another backend", "a cache made by this backend");
  }
  return cache.impl();
}

template <class T>
void put(std::vector<std::uint8_t>& out, const std::vector<T>& v) {
  const std::size_t at = out.size();
  out.resize(at + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data() + at, v.data(), v.size() * sizeof(T));
}

}  // namespace

std::vector<std::uint8_t> Backend::save_cache(const KvCache& cache) {
  const auto& c = live_cache("save_cache", cache, owner_tag());
  std::vector<std::uint8_t> out(sizeof(Header));
  const Header h = header_of(c->config);
  std::memcpy(out.data(), &h, sizeof h);
  put(out, c->slot_pos);
  put(out, c->next);
  put(out, c->oldest);
  put(out, read_words(*c->k));
  if (c->v) put(out, read_words(*c->v));
  return out;
}

void Backend::restore_cache(KvCache& cache, std::span<const std::uint8_t> bytes) {
  const char* op = "restore_cache";
  const auto& c = live_cache(op, cache, owner_tag());
  const Header want = header_of(c->config);
  const std::size_t n_seqs = c->config.n_seqs, slots = n_seqs * c->config.capacity;
  const std::size_t v_words = c->v ? c->v->words : 0;
  const std::size_t size = sizeof(Header) + 4 * (slots + 2 * n_seqs + c->k->words + v_words);
  Header got{};
  if (bytes.size() >= sizeof got) std::memcpy(&got, bytes.data(), sizeof got);
  if (bytes.size() < sizeof got || std::memcmp(got.magic, kMagic, sizeof kMagic) != 0) {
    throw InvalidArgument(op, "bytes", "not a saved cache", "the output of Backend::save_cache");
  }
  if (got.version != kVersion && got.version != kLatentVersion) {
    throw InvalidArgument(op, "bytes: format version", std::to_string(got.version),
                          std::to_string(kVersion) + " or " + std::to_string(kLatentVersion) + " (latent)");
  }
  const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> fields[] = {
      {"latent", {got.version == kLatentVersion, want.version == kLatentVersion}},
      {"dtype", {got.dtype, want.dtype}},
      {"rope", {got.rope, want.rope}},
      {"n_seqs", {got.n_seqs, want.n_seqs}},
      {"capacity", {got.capacity, want.capacity}},
      {"n_kv_heads", {got.n_kv_heads, want.n_kv_heads}},
      {"head_dim", {got.head_dim, want.head_dim}},
      {"v_head_dim", {got.v_head_dim ? got.v_head_dim : got.head_dim, want.v_head_dim ? want.v_head_dim : want.head_dim}},
      {"n_sinks", {got.n_sinks, want.n_sinks}}};
  for (const auto& [name, v] : fields) {
    if (v.first != v.second) {
      throw InvalidArgument(op, std::string("bytes: config.") + name, std::to_string(v.first),
                            "the cache's " + std::to_string(v.second));
    }
  }
  if (bytes.size() != size) {
    throw InvalidArgument(op, "bytes.size()", std::to_string(bytes.size()), std::to_string(size));
  }
  const std::uint8_t* p = bytes.data() + sizeof(Header);
  auto take = [&](std::size_t n) {
    std::vector<std::uint32_t> v(n);
    if (n != 0) std::memcpy(v.data(), p, 4 * n);  // a latent cache has no V words: data() may be null
    p += 4 * n;
    return v;
  };
  std::vector<std::uint32_t> slot_pos = take(slots), next = take(n_seqs), oldest = take(n_seqs);
  std::vector<std::uint32_t> k = take(c->k->words), v = take(v_words);
  // Bookkeeping the cache could not have written is refused: attention trusts it.
  for (std::size_t s = 0; s < n_seqs; ++s) {
    const auto nx = static_cast<std::int32_t>(next[s]), old = static_cast<std::int32_t>(oldest[s]);
    bool ok = nx >= 0 && old >= static_cast<std::int32_t>(c->config.n_sinks);
    for (std::size_t i = 0; ok && i < c->config.capacity; ++i) {
      const auto pos = static_cast<std::int32_t>(slot_pos[s * c->config.capacity + i]);
      ok = pos >= -1 && pos < nx && (pos < 0 || c->slot(pos) == i);
    }
    if (!ok) {
      throw InvalidArgument(op, "bytes: sequence " + std::to_string(s) + " bookkeeping", "inconsistent", "what save_cache wrote");
    }
  }
  write_words(*c->k, k);
  if (c->v) write_words(*c->v, v);
  auto ints = [](const std::vector<std::uint32_t>& w) { return std::vector<std::int32_t>(w.begin(), w.end()); };
  c->slot_pos = ints(slot_pos);
  c->next = ints(next);
  c->oldest = ints(oldest);
  c->publish();
}

}  // namespace vkattn
