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
// A paged cache (version 3, latent or not) holds only the blocks its sequences hold: after
// the header, u64 block_size, u32 latent, u32 blocks saved (n), then the slot positions,
// next and oldest as above, i32 block tables [n_seqs * capacity / block_size] naming the
// saved blocks 0..n-1 (-1: none), then K's words of each saved block, V's likewise (f32 or
// f16 rows; a quantized block's codes, then its scales, two per word). It restores into a
// paged cache of the same configuration but for n_blocks, which need only be >= n.
#include <algorithm>
#include <cstring>
#include <new>
#include <string_view>

#include "common/heap_ledger.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/op_scope.hpp"
#include "common/quant.hpp"
#include "common/shape_math.hpp"
#include "common/tensor_impl.hpp"
#include "common/validate.hpp"
#include "vkattn/backend.hpp"
#include "vkattn/error.hpp"

namespace vkattn {

namespace {

constexpr char kMagic[8] = {'v', 'k', 'a', 't', 't', 'n', 'K', 'V'};
constexpr std::uint32_t kVersion = 1, kLatentVersion = 2, kPagedVersion = 3;

struct Header {
  char magic[8];
  std::uint32_t version, dtype, rope, v_head_dim;
  std::uint64_t n_seqs, capacity, n_kv_heads, head_dim, n_sinks;
};
static_assert(sizeof(Header) == 64);

Header header_of(const KvCacheConfig& c) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = c.paged ? kPagedVersion : c.latent ? kLatentVersion : kVersion;
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

// A cache's host bookkeeping, whole (a ring cache's table, refs and free list are empty).
struct Bookkeeping {
  std::vector<std::int32_t> slot_pos, next, oldest, table, refs, free_list;
  std::int32_t free_count = 0;
};

Bookkeeping bookkeeping(const detail::KvCacheImpl& c) {
  return {c.slot_pos, c.next, c.oldest, c.table, c.refs, c.free_list, c.free_count};
}

// Every sequence empty, every block free, as a new cache has it.
Bookkeeping empty_bookkeeping(const detail::KvCacheImpl& c) {
  Bookkeeping e{.slot_pos = std::vector<std::int32_t>(c.slot_pos.size(), -1),
                .next = std::vector<std::int32_t>(c.next.size(), 0),
                .oldest = std::vector<std::int32_t>(c.oldest.size(), static_cast<std::int32_t>(c.config.n_sinks)),
                .table = std::vector<std::int32_t>(c.table.size(), -1),
                .refs = std::vector<std::int32_t>(c.refs.size(), 0),
                .free_list = detail::KvCacheImpl::every_block_free(c.free_list.size()),
                .free_count = static_cast<std::int32_t>(c.free_list.size())};
  return e;
}

// Assigns |b| (copies, so that the caller's stays whole for a later put_back).
void put_back(detail::KvCacheImpl& c, const Bookkeeping& b) {
  c.slot_pos = b.slot_pos;
  c.next = b.next;
  c.oldest = b.oldest;
  c.table = b.table;
  c.refs = b.refs;
  c.free_list = b.free_list;
  c.free_count = b.free_count;
}

template <class T>
void put(std::vector<std::uint8_t>& out, const std::vector<T>& v) {
  const std::size_t at = out.size();
  out.resize(at + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data() + at, v.data(), v.size() * sizeof(T));
}

// After a paged save's header.
struct PagedHeader {
  std::uint64_t block_size;
  std::uint32_t latent, n_saved;
};
static_assert(sizeof(PagedHeader) == 16);

// One block of a paged cache's K or V (|t|, its rows |row| elements wide) as words, and
// back: its rows' words, or a quantized block's codes and then its scales, two per word.
struct BlockWords {
  std::shared_ptr<detail::TensorImpl> t;
  std::size_t elems;  // per block
  bool quant() const { return detail::is_quantized(t->dtype); }
  std::size_t data() const { return detail::value_words(elems, t->dtype); }
  std::size_t halves() const { return quant() ? elems / detail::kQuantBlock : 0; }
  std::size_t words() const { return data() + (halves() + 1) / 2; }
  std::size_t scale_half(std::size_t b, std::size_t h) const {
    return 2 * detail::scale_words_offset(t->numel, t->dtype) + b * halves() + h;
  }
  void get(const std::vector<std::uint32_t>& all, std::size_t b, std::vector<std::uint32_t>& out) const {
    out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(b * data()),
               all.begin() + static_cast<std::ptrdiff_t>((b + 1) * data()));
    const std::size_t at = out.size();
    out.resize(at + (halves() + 1) / 2, 0);
    for (std::size_t h = 0; h < halves(); ++h) detail::set_half(out, 2 * at + h, detail::get_half(all, scale_half(b, h)));
  }
  void put(std::vector<std::uint32_t>& all, std::size_t b, const std::uint32_t* in) const {
    std::copy_n(in, data(), all.begin() + static_cast<std::ptrdiff_t>(b * data()));
    const std::span<const std::uint32_t> scales(in + data(), words() - data());
    for (std::size_t h = 0; h < halves(); ++h) detail::set_half(all, scale_half(b, h), detail::get_half(scales, h));
  }
};

std::vector<BlockWords> block_words(const detail::KvCacheImpl& c) {
  const auto& cf = c.config;
  std::vector<BlockWords> out{{c.k, cf.block_size * cf.n_kv_heads * cf.head_dim}};
  if (c.v) out.push_back({c.v, cf.block_size * cf.n_kv_heads * detail::value_head_dim(cf)});
  return out;
}

// A paged cache's tables and blocks: the blocks its sequences hold, numbered in the order
// the tables first name them.
void save_blocks(const detail::KvCacheImpl& c, const std::vector<std::vector<std::uint32_t>>& words,
                 std::vector<std::uint8_t>& out, std::size_t header_at) {
  std::vector<std::int32_t> number(c.config.n_blocks, -1), table(c.table.size(), -1), saved;
  for (std::size_t i = 0; i < c.table.size(); ++i) {
    const std::int32_t b = c.table[i];
    if (b < 0) continue;
    std::int32_t& n = number[static_cast<std::size_t>(b)];
    if (n < 0) {
      n = static_cast<std::int32_t>(saved.size());
      saved.push_back(b);
    }
    table[i] = n;
  }
  const PagedHeader ph{c.config.block_size, c.config.latent ? 1u : 0u, static_cast<std::uint32_t>(saved.size())};
  std::memcpy(out.data() + header_at, &ph, sizeof ph);
  put(out, c.slot_pos);
  put(out, c.next);
  put(out, c.oldest);
  put(out, table);
  const std::vector<BlockWords> bw = block_words(c);
  for (std::size_t t = 0; t < bw.size(); ++t) {
    std::vector<std::uint32_t> blocks;
    for (std::int32_t b : saved) bw[t].get(words[t], static_cast<std::size_t>(b), blocks);
    put(out, blocks);
  }
}

// A save's headers, checked against the configuration |cf| of the cache it would restore:
// the format, then each field of the configuration that differs, by name.
struct SavedHeaders {
  Header header;
  PagedHeader paged_header;  // a paged save's
  bool paged;
};

SavedHeaders check_saved_headers(const char* op, std::span<const std::uint8_t> bytes, const KvCacheConfig& cf) {
  const Header want = header_of(cf);
  Header got{};
  if (bytes.size() >= sizeof got) std::memcpy(&got, bytes.data(), sizeof got);
  if (bytes.size() < sizeof got || std::memcmp(got.magic, kMagic, sizeof kMagic) != 0) {
    throw InvalidArgument(op, "bytes", "not a saved cache", "the output of Backend::save_cache");
  }
  if (got.version != kVersion && got.version != kLatentVersion && got.version != kPagedVersion) {
    throw InvalidArgument(op, "bytes: format version", std::to_string(got.version),
                          std::to_string(kVersion) + ", " + std::to_string(kLatentVersion) + " (latent) or " +
                              std::to_string(kPagedVersion) + " (paged)");
  }
  const bool paged = got.version == kPagedVersion;
  PagedHeader ph{};
  if (paged && bytes.size() < sizeof got + sizeof ph) {  // not zeros read as its fields
    throw InvalidArgument(op, "bytes.size()", std::to_string(bytes.size()),
                          ">= " + std::to_string(sizeof got + sizeof ph) + " (a paged save's headers)");
  }
  if (paged) std::memcpy(&ph, bytes.data() + sizeof got, sizeof ph);
  const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> fields[] = {
      {"paged", {paged, cf.paged}},
      {"latent", {paged ? ph.latent : got.version == kLatentVersion, cf.latent}},
      {"dtype", {got.dtype, want.dtype}},
      {"rope", {got.rope, want.rope}},
      {"n_seqs", {got.n_seqs, want.n_seqs}},
      {"capacity", {got.capacity, want.capacity}},
      {"n_kv_heads", {got.n_kv_heads, want.n_kv_heads}},
      {"head_dim", {got.head_dim, want.head_dim}},
      {"v_head_dim", {got.v_head_dim ? got.v_head_dim : got.head_dim, want.v_head_dim ? want.v_head_dim : want.head_dim}},
      {"n_sinks", {got.n_sinks, want.n_sinks}},
      {"block_size", {paged ? ph.block_size : 0, cf.paged ? cf.block_size : 0}}};
  // A dtype or a rope by its name, where it has one.
  const auto shown = [](std::string_view name, std::uint64_t v) -> std::string {
    if (name == "dtype" && v <= INT32_MAX && std::string_view(to_string(static_cast<DType>(v))) != "unknown") {
      return to_string(static_cast<DType>(v));
    }
    if (name == "rope" && v <= 1) return v == 0 ? "KvRope::stored" : "KvRope::on_read";
    return std::to_string(v);
  };
  for (const auto& [name, v] : fields) {
    if (v.first != v.second) {
      throw InvalidArgument(op, std::string("bytes: config.") + name, shown(name, v.first),
                            "the cache's " + shown(name, v.second));
    }
  }
  if (paged && ph.n_saved > cf.n_blocks) {
    throw InvalidArgument(op, "bytes: blocks saved", std::to_string(ph.n_saved),
                          "at most the cache's n_blocks = " + std::to_string(cf.n_blocks));
  }
  return {got, ph, paged};
}

// Bookkeeping the cache could not have written is refused: attention and truncate trust
// it. Appends are consecutive and keep the newest, so a sequence at |next| holds exactly
// its sinks below next and the ring positions from max(n_sinks, next - ring) on, each in
// its slot, and oldest is that bound. A paged sequence holds a block for exactly the runs
// of slots that hold a position, no block twice, and every block saved is held; each row of
// a block several hold (a fork's) is one position for all of them (appends copy a shared
// block before they write it; a run's first row is always held, so a block at two runs of
// their tables fails this too). Returns each block's references (none for a ring cache).
std::vector<std::int32_t> check_saved_bookkeeping(const char* op, const detail::KvCacheImpl& c,
                                                  const std::vector<std::int32_t>& slot_pos,
                                                  const std::vector<std::int32_t>& next, const std::vector<std::int32_t>& oldest,
                                                  const std::vector<std::int32_t>& table, std::uint32_t n_saved) {
  const KvCacheConfig& cf = c.config;
  const std::size_t n_seqs = cf.n_seqs;
  std::vector<std::int32_t> refs(cf.paged ? cf.n_blocks : 0, 0);
  std::vector<std::int32_t> held(cf.capacity);
  std::vector<std::size_t> named_by(n_saved, n_seqs);  // the last sequence naming each block
  std::vector<std::int32_t> row_pos(cf.paged ? std::size_t{n_saved} * cf.block_size : 0, -1);
  const auto sinks = static_cast<std::int64_t>(cf.n_sinks);
  for (std::size_t s = 0; s < n_seqs; ++s) {
    const std::int64_t n = next[s];
    const std::int64_t from = std::max(sinks, n - static_cast<std::int64_t>(c.ring()));
    bool ok = n >= 0 && oldest[s] == from;
    if (ok) {
      std::fill(held.begin(), held.end(), -1);
      for (std::int64_t p = 0; p < std::min(sinks, n); ++p) held[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(p);
      for (std::int64_t p = from; p < n; ++p) held[c.slot(static_cast<std::int32_t>(p))] = static_cast<std::int32_t>(p);
      ok = std::equal(held.begin(), held.end(), slot_pos.begin() + static_cast<std::ptrdiff_t>(s * cf.capacity));
    }
    for (std::size_t e = 0; ok && e < c.entries; ++e) {
      const std::int32_t b = table[s * c.entries + e];
      const auto run = slot_pos.begin() + static_cast<std::ptrdiff_t>(s * cf.capacity + e * cf.block_size);
      const bool used = std::any_of(run, run + static_cast<std::ptrdiff_t>(cf.block_size), [](std::int32_t x) { return x >= 0; });
      ok = b >= -1 && b < static_cast<std::int32_t>(n_saved) && (b >= 0) == used;
      if (ok && b >= 0) {
        const auto u = static_cast<std::size_t>(b);
        ok = named_by[u] != s;  // a block twice in one table
        named_by[u] = s;
        for (std::size_t j = 0; ok && j < cf.block_size; ++j) {
          std::int32_t& row = row_pos[u * cf.block_size + j];
          ok = run[static_cast<std::ptrdiff_t>(j)] < 0 || row < 0 || row == run[static_cast<std::ptrdiff_t>(j)];
          if (run[static_cast<std::ptrdiff_t>(j)] >= 0) row = run[static_cast<std::ptrdiff_t>(j)];
        }
        ++refs[u];
      }
    }
    if (!ok) {
      throw InvalidArgument(op, "bytes: sequence " + std::to_string(s) + " bookkeeping", "inconsistent", "what save_cache wrote");
    }
  }
  if (std::find(refs.begin(), refs.begin() + n_saved, 0) != refs.begin() + n_saved) {
    throw InvalidArgument(op, "bytes: block tables", "a saved block no sequence holds", "what save_cache wrote");
  }
  return refs;
}

}  // namespace

std::vector<std::uint8_t> Backend::save_cache(const KvCache& cache) try {
  detail::OpScope scope("save_cache");
  const auto& c = detail::check_cache("save_cache", cache, owner_tag(), "this backend");
  c->check_written("save_cache");
  // Positions a list planned and has not run (recorded or replayed, not submitted) have no
  // rows on the device yet: saved, they would come back as keys of zeros.
  for (std::size_t s = 0; s < c->config.n_seqs; ++s) {
    if (c->touched[s].at > c->ran_at[s]) {
      throw InvalidArgument("save_cache", "cache",
                            "a cache whose sequence " + std::to_string(s) + " holds positions of a command list that has not run",
                            "a cache after the lists that wrote it ran (submit them first, or destroy them)");
    }
  }
  std::vector<std::uint8_t> out(sizeof(Header) + (c->config.paged ? sizeof(PagedHeader) : 0));
  const Header h = header_of(c->config);
  std::memcpy(out.data(), &h, sizeof h);
  if (c->config.paged) {
    std::vector<std::vector<std::uint32_t>> words{read_words(*c->k)};
    if (c->v) words.push_back(read_words(*c->v));
    save_blocks(*c, words, out, sizeof(Header));
    return out;
  }
  put(out, c->slot_pos);
  put(out, c->next);
  put(out, c->oldest);
  put(out, read_words(*c->k));
  if (c->v) put(out, read_words(*c->v));
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("save_cache");
}

void Backend::restore_cache(KvCache& cache, std::span<const std::uint8_t> bytes) try {
  detail::OpScope scope("restore_cache");
  const char* op = "restore_cache";
  const auto& c = detail::check_cache(op, cache, owner_tag(), "this backend");
  const detail::CacheInUse use(c.get(), op);
  const KvCacheConfig& cf = c->config;
  const auto [got, ph, paged] = check_saved_headers(op, bytes, cf);
  const std::size_t n_seqs = cf.n_seqs, slots = n_seqs * cf.capacity;
  // A paged save holds its tables and the blocks they name; another, K and V whole.
  const std::vector<BlockWords> bw = paged ? block_words(*c) : std::vector<BlockWords>{};
  std::size_t data_words = 0;
  for (const BlockWords& b : bw) data_words += ph.n_saved * b.words();
  if (!paged) data_words = c->k->words + (c->v ? c->v->words : 0);
  const std::size_t size = sizeof(Header) + (paged ? sizeof ph : 0) + 4 * (slots + 2 * n_seqs + c->table.size() + data_words);
  if (bytes.size() != size) {
    throw InvalidArgument(op, "bytes.size()", std::to_string(bytes.size()),
                          std::to_string(size) + " (what save_cache wrote for this configuration)");
  }
  const std::uint8_t* p = bytes.data() + sizeof(Header) + (paged ? sizeof ph : 0);
  auto take = [&](std::size_t n) {
    std::vector<std::uint32_t> v(n);
    if (n != 0) std::memcpy(v.data(), p, 4 * n);  // a latent cache has no V words: data() may be null
    p += 4 * n;
    return v;
  };
  auto ints = [](const std::vector<std::uint32_t>& w) { return std::vector<std::int32_t>(w.begin(), w.end()); };
  const std::vector<std::int32_t> slot_pos = ints(take(slots)), next = ints(take(n_seqs)), oldest = ints(take(n_seqs));
  const std::vector<std::int32_t> table = ints(take(c->table.size()));
  const std::vector<std::int32_t> refs = check_saved_bookkeeping(op, *c, slot_pos, next, oldest, table, ph.n_saved);
  // The restored bookkeeping, built in full before anything changes.
  Bookkeeping restored = bookkeeping(*c);
  restored.slot_pos = slot_pos;
  restored.next = next;
  restored.oldest = oldest;
  if (paged) {
    restored.table = table;
    restored.refs = refs;
    restored.free_count = 0;
    for (std::size_t b = cf.n_blocks; b-- > 0;) {  // taken from the end: the lowest first
      if (refs[b] == 0) restored.free_list[static_cast<std::size_t>(restored.free_count++)] = static_cast<std::int32_t>(b);
    }
  }
  // K's and V's words, made before anything changes (a host allocation failing here
  // changes nothing).
  std::vector<std::pair<detail::TensorImpl*, std::vector<std::uint32_t>>> writes;
  if (paged) {
    for (const BlockWords& b : bw) {
      std::vector<std::uint32_t> all(b.t->words, 0);
      const std::vector<std::uint32_t> blocks = take(ph.n_saved * b.words());
      for (std::size_t i = 0; i < ph.n_saved; ++i) b.put(all, i, blocks.data() + i * b.words());
      writes.emplace_back(b.t.get(), std::move(all));
    }
  } else {
    writes.emplace_back(c->k.get(), take(c->k->words));
    if (c->v) writes.emplace_back(c->v.get(), take(c->v->words));
  }
  // K and V take several copies, any of which may fail (out of memory): the device's slot
  // table is emptied first, so that no failure leaves it naming rows half rewritten. A
  // failure before that changes nothing; one after it leaves every sequence empty.
  const Bookkeeping before = bookkeeping(*c), empty = empty_bookkeeping(*c);
  put_back(*c, empty);
  try {
    c->publish();
  } catch (...) {
    put_back(*c, before);
    throw;
  }
  c->changed_all();
  c->clear_unwritten();
  std::fill(c->reset_at.begin(), c->reset_at.end(), c->clock);
  for (const auto& [t, words] : writes) write_words(*t, words);
  put_back(*c, restored);
  try {
    c->publish();
  } catch (...) {
    put_back(*c, empty);  // the device's table is still the empty one
    throw;
  }
  c->changed_all();
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("restore_cache");
}

}  // namespace vkattn
