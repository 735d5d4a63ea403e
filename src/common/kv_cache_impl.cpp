#include "common/kv_cache_impl.hpp"

#include <algorithm>
#include <bit>
#include <new>

#include "common/heap_ledger.hpp"
#include "common/op_scope.hpp"
#include "common/rope_math.hpp"
#include "common/shape_math.hpp"
#include "common/validate.hpp"

namespace vkattn::detail {

namespace {

// A K or V head dim |d| (the config's |field|) fits the limit and the dtype's storage.
void check_head_dim(const char* op, const KvCacheConfig& c, const char* field, std::size_t d, const char* required) {
  if (d == 0 || d > kMaxAttentionHeadDim) {
    throw InvalidArgument(op, field, std::to_string(d), "[1, " + std::to_string(kMaxAttentionHeadDim) + "]" + required);
  }
  if (c.dtype == DType::f16 && d % 2 != 0) {
    throw InvalidArgument(op, field, std::to_string(d), "even for f16 (two halves per word)");
  }
  if (is_quantized(c.dtype) && d % kQuantBlock != 0) {
    throw InvalidArgument(op, field, std::to_string(d),
                          std::string("a multiple of 32 for ") + to_string(c.dtype) + " (blocks of 32 along the head)");
  }
}

}  // namespace

KvShapes check_kv_cache_config(const KvCacheConfig& c) {
  const char* op = "kv_cache";
  if (c.n_seqs == 0) throw InvalidArgument(op, "config.n_seqs", "0", ">= 1");
  const char* required = "; required, no default (0 = not set)";
  if (c.n_kv_heads == 0) throw InvalidArgument(op, "config.n_kv_heads", "0", std::string(">= 1") + required);
  check_head_dim(op, c, "config.head_dim", c.head_dim, c.head_dim == 0 ? required : "");
  if (!is_kv_dtype(c.dtype)) {
    const std::string name = to_string(c.dtype);
    throw InvalidArgument(op, "config.dtype",
                          name != "unknown" ? name : "DType(" + std::to_string(static_cast<int>(c.dtype)) + ")",
                          "f32, f16, q8_0 or q4_0");
  }
  if (c.v_head_dim != 0) check_head_dim(op, c, "config.v_head_dim", c.v_head_dim, " (0 = head_dim)");
  if (c.latent && value_head_dim(c) > c.head_dim) {
    throw InvalidArgument(op, "config.v_head_dim", std::to_string(c.v_head_dim),
                          "[1, head_dim = " + std::to_string(c.head_dim) +
                              "] for a latent cache (V is the first v_head_dim dims of each key row; 0 = head_dim)");
  }
  if (c.capacity == 0 || c.capacity > (std::size_t{1} << 30)) {
    throw InvalidArgument(op, "config.capacity", std::to_string(c.capacity),
                          std::string("[1, 2^30]") + (c.capacity == 0 ? required : ""));
  }
  // Slots are counted in 32-bit ints (rows, slot-table words) across the sequences.
  if (c.n_seqs > std::size_t{INT32_MAX} / c.capacity) {
    throw InvalidArgument(op, "config.n_seqs", std::to_string(c.n_seqs),
                          "[1, (2^31 - 1) / capacity = " + std::to_string(std::size_t{INT32_MAX} / c.capacity) +
                              "]: n_seqs x capacity slots are counted in 32-bit ints");
  }
  if (c.n_sinks >= c.capacity) {
    throw InvalidArgument(op, "config.n_sinks", std::to_string(c.n_sinks), "< capacity = " + std::to_string(c.capacity));
  }
  if (c.rope != KvRope::stored && c.rope != KvRope::on_read) {
    throw InvalidArgument(op, "config.rope", std::to_string(static_cast<int>(c.rope)), "KvRope::stored or KvRope::on_read");
  }
  if (c.rope == KvRope::on_read) {
    // Rotating on read would score rotated keys but weigh the same dims unrotated as
    // values; absorbed MLA rotates only its last 64 dims (a rotary_offset, which on_read
    // refuses below anyway).
    if (c.latent) throw InvalidArgument(op, "config.rope", "KvRope::on_read", "KvRope::stored for a latent cache");
    const RopeConfig r = check_rope_config(op, c.rope_config, c.head_dim, kCacheRopeNames);
    if (r.mrope) {
      throw InvalidArgument(op, "config.rope_config.mrope", "set",
                            "unset with KvRope::on_read (rotate M-RoPE keys before kv_append, KvRope::stored)");
    }
    if (r.rotary_offset != 0) {
      throw InvalidArgument(op, "config.rope_config.rotary_offset", std::to_string(r.rotary_offset),
                            "0 with KvRope::on_read (rotate a slice before kv_append, KvRope::stored)");
    }
    // Rotation on read leaves the dims unscaled; with the whole head rotated, an attention
    // factor a is AttentionConfig::scale times a^2, which the caller can give instead.
    const char* fold = "1 with KvRope::on_read (set it to 1 and multiply AttentionConfig::scale by its square)";
    if (r.attention_factor && *r.attention_factor != 1.0) {
      throw InvalidArgument(op, "config.rope_config.attention_factor", std::to_string(*r.attention_factor), fold);
    }
    // Dynamic NTK's base follows the largest position of a call; on read, queries and keys
    // are rotated at in-cache positions in different passes, which would each take their
    // own base (the relative positions lost): one length for both, or none.
    if (table_follows_positions(r)) {
      throw InvalidArgument(op, "config.rope_config.sequence_length", "0 (1 + largest position of a call) with dynamic_ntk",
                            ">= 1 with KvRope::on_read (one length for the queries and the keys: the capacity, say)");
    }
    if (const double a = rope_frequencies(r, c.head_dim).attention_factor; a != 1.0) {
      throw InvalidArgument(op, "config.rope_config.attention_factor",
                            "unset, which makes " + std::to_string(a) + " with this scaling", fold);
    }
  }
  // A paged cache's K and V are its pool: [n_blocks, block_size, ...] in place of
  // [n_seqs, capacity, ...].
  std::size_t outer = c.n_seqs, inner = c.capacity;
  if (c.paged) {
    check_paging(op, c);
    outer = c.n_blocks;
    inner = c.block_size;
  } else if (c.n_blocks != 0) {  // a paged cache's pool asked for, paged forgotten
    throw InvalidArgument(op, "config.n_blocks", std::to_string(c.n_blocks),
                          "0 for a ring cache; with config.paged = true, the pool's blocks");
  }
  // K's and V's elements within a tensor's 2^40, checked here so that the message names
  // the config's fields, not the cache's internal tensor (slots < 2^31: no overflow).
  const std::size_t dim = std::max(c.head_dim, value_head_dim(c));
  const std::size_t per_head = outer * inner * dim, most_heads = (std::size_t{1} << 40) / per_head;
  if (c.n_kv_heads > most_heads) {
    const std::string slots = c.paged ? "n_blocks x block_size" : "n_seqs x capacity",
                      why = ": K and V hold at most 2^40 elements each";
    if (most_heads == 0) {
      throw InvalidArgument(op, c.paged ? "config.n_blocks" : "config.capacity",
                            std::to_string(c.paged ? c.n_blocks : c.capacity), slots + " x head_dim <= 2^40" + why);
    }
    throw InvalidArgument(op, "config.n_kv_heads", std::to_string(c.n_kv_heads),
                          "[1, 2^40 / (" + slots + " x head_dim) = " + std::to_string(most_heads) + "]" + why);
  }
  if (c.latent) return {{outer, inner, c.n_kv_heads, c.head_dim}, {}};
  return {{outer, inner, c.n_kv_heads, c.head_dim}, {outer, inner, c.n_kv_heads, value_head_dim(c)}};
}

std::int32_t KvCacheImpl::cache_position(std::size_t seq, std::int32_t position) const {
  if (position < static_cast<std::int32_t>(config.n_sinks)) return position;
  return static_cast<std::int32_t>(config.n_sinks) + (position - oldest[seq]);
}

KvCacheImpl::KvCacheImpl(const void* owner_, const KvCacheConfig& config_, std::shared_ptr<TensorImpl> k_,
                         std::shared_ptr<TensorImpl> v_)
    : owner(owner_), config(config_), k(std::move(k_)), v(std::move(v_)), changed_at(config_.n_seqs, 0),
      unwritten(config_.n_seqs, 0), slot_pos(config_.n_seqs * config_.capacity, -1), next(config_.n_seqs, 0),
      oldest(config_.n_seqs, static_cast<std::int32_t>(config_.n_sinks)) {
  reset_at.assign(config.n_seqs, 0);
  touched.assign(config.n_seqs + 1, {});
  ran_at.assign(config.n_seqs + 1, 0);
  put_back.assign(config.n_seqs, {});
  if (!config.paged) return;
  block_shift = static_cast<std::uint32_t>(std::countr_zero(config.block_size));
  entries = config.capacity >> block_shift;
  table.assign(config.n_seqs * entries, -1);
  refs.assign(config.n_blocks, 0);
  free_list = every_block_free(config.n_blocks);
  free_count = static_cast<std::int32_t>(config.n_blocks);
}

std::size_t KvCacheImpl::check_seq(const char* op, std::size_t seq, const std::string& name) const {
  if (seq >= config.n_seqs) {
    throw InvalidArgument(op, name, std::to_string(seq), "[0, n_seqs = " + std::to_string(config.n_seqs) + ")");
  }
  return seq;
}

std::size_t KvCacheImpl::check_seq(const char* op, std::int32_t seq, const char* array, std::size_t index) const {
  if (seq >= 0 && static_cast<std::size_t>(seq) < config.n_seqs) return static_cast<std::size_t>(seq);
  throw InvalidArgument(op, std::string(array) + "[" + std::to_string(index) + "]", std::to_string(seq),
                        "[0, n_seqs = " + std::to_string(config.n_seqs) + ")");
}

void KvCacheImpl::PutBacks::add(std::uint64_t from, std::uint64_t to, std::uint64_t ran_at) noexcept {
  std::array<Span, kSpans + 1> all;  // in order of |from|, disjoint
  std::size_t count = 0;
  bool placed = false;
  for (std::size_t i = 0; i < n; ++i) {
    const Span s = spans[i];
    if (s.to < ran_at) continue;
    if (s.from <= to && from <= s.to) {  // overlapping or touching: one span
      from = std::min(from, s.from);
      to = std::max(to, s.to);
      continue;
    }
    if (!placed && s.from > from) all[count++] = {from, to}, placed = true;
    all[count++] = s;
  }
  if (!placed) all[count++] = {from, to};
  if (count > kSpans) {  // no room: the nearest two become one
    std::size_t nearest = 0;
    for (std::size_t i = 1; i + 1 < count; ++i) {
      if (all[i + 1].from - all[i].to < all[nearest + 1].from - all[nearest].to) nearest = i;
    }
    all[nearest].to = all[nearest + 1].to;
    for (std::size_t i = nearest + 1; i + 1 < count; ++i) all[i] = all[i + 1];
    --count;
  }
  std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count), spans.begin());
  n = count;
}

bool KvCacheImpl::PutBacks::covers(std::uint64_t tick) const noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if (spans[i].from < tick && tick <= spans[i].to) return true;
  }
  return false;
}

void KvCacheImpl::ran_to(std::size_t i, std::uint64_t tick) noexcept {
  ran_at[i] = std::max(ran_at[i], tick);
  for (bool more = true; more;) {  // a dropped list planned after one that ran now
    more = false;
    for (auto it = dropped.begin(); it != dropped.end(); ++it) {
      if (it->seq == i && it->need <= ran_at[i]) {
        ran_at[i] = std::max(ran_at[i], it->last);
        dropped.erase(it);
        more = true;
        break;
      }
    }
  }
}

void KvCacheImpl::drop_planned(std::size_t i, std::uint64_t need, std::uint64_t last) noexcept {
  if (need <= ran_at[i]) {
    ran_to(i, last);
    return;
  }
  try {
    dropped.push_back({i, need, last});
  } catch (const std::bad_alloc&) {  // later lists then wait until a reset or restore_cache
  }
}

std::size_t KvCacheImpl::first_unwritten() const {
  return static_cast<std::size_t>(std::find(unwritten.begin(), unwritten.end(), std::uint8_t{1}) - unwritten.begin());
}

void KvCacheImpl::refuse_unwritten(const char* op, std::size_t seq, bool named) const {
  const std::string s = std::to_string(seq);
  const std::string why =
      "holds positions whose rows a command list never wrote (destroyed before it ran, with later changes built on "
      "them, or a CPU submission that failed part way)";
  if (named) {
    throw InvalidArgument(
        op, "seq", s,
        "a sequence whose rows were written (this one " + why + "): KvCache::reset(" + s + ") it instead, or restore_cache");
  }
  throw InvalidArgument(op, "cache", "a cache whose sequence " + s + " " + why,
                        "a cache after KvCache::reset(" + s + ") (or restore_cache): the device never wrote those rows");
}

std::vector<std::int32_t> KvCacheImpl::every_block_free(std::size_t n_blocks) {
  // Taken from the end: block 0 first.
  std::vector<std::int32_t> list(n_blocks);
  for (std::size_t b = 0; b < n_blocks; ++b) list[b] = static_cast<std::int32_t>(n_blocks - 1 - b);
  return list;
}

void KvCacheImpl::publish() const {
  if (!slots) return;
  std::vector<std::uint32_t> words(slot_table_words());
  // int32 and uint32 may alias: each sequence's entries (and block table) as they are,
  // then the bounds.
  const std::size_t c = config.capacity, stride = meta_stride();
  for (std::size_t s = 0; s < config.n_seqs; ++s) {
    std::copy_n(slot_pos.begin() + static_cast<std::ptrdiff_t>(s * c), c,
                words.begin() + static_cast<std::ptrdiff_t>(s * stride));
    std::copy_n(table.begin() + static_cast<std::ptrdiff_t>(s * entries), entries,
                words.begin() + static_cast<std::ptrdiff_t>(s * stride + c));
    words[bound_offset() + s] = static_cast<std::uint32_t>(occupancy_bound(slot_pos, s, c));
  }
  slots->store(words);
}

void KvCacheImpl::publish(std::size_t seq) const {
  if (!slots) return;
  const std::size_t c = config.capacity, stride = meta_stride();
  std::vector<std::uint32_t> words(stride);
  std::copy_n(slot_pos.begin() + static_cast<std::ptrdiff_t>(seq * c), c, words.begin());
  std::copy_n(table.begin() + static_cast<std::ptrdiff_t>(seq * entries), entries,
              words.begin() + static_cast<std::ptrdiff_t>(c));
  const auto bound = static_cast<std::uint32_t>(occupancy_bound(slot_pos, seq, c));
  const TensorImpl::WordRun runs[] = {{seq * stride, words}, {bound_offset() + seq, {&bound, 1}}};
  slots->store_runs(runs);
}

void KvCacheImpl::fill_keys(ScoresParams& p, std::span<const std::int32_t> words) const {
  const std::size_t c = config.capacity, stride = meta_stride();
  p.k_pos.resize(config.n_seqs * c);
  p.k_seq.resize(p.k_pos.size());
  p.k_cpos.assign(p.rope_on_read ? p.k_pos.size() : 0, 0);
  for (std::size_t s = 0; s < config.n_seqs; ++s) {
    for (std::size_t j = 0; j < c; ++j) {
      const std::int32_t position = words[s * stride + j];
      const std::size_t i = s * c + j;
      p.k_pos[i] = position;
      p.k_seq[i] = position >= 0 ? static_cast<std::int32_t>(s) : -1;
      if (p.rope_on_read && position >= 0) {  // attn_meta.glsl's key_cache_position
        const std::int32_t sinks = p.ring[0];
        p.k_cpos[i] = position < sinks ? position : sinks + position - p.ring[1 + s];
      }
    }
  }
}

std::size_t KvCacheImpl::slot(std::int32_t position) const {
  const auto p = static_cast<std::size_t>(position);
  return p < config.n_sinks ? p : config.n_sinks + (p - config.n_sinks) % ring();
}

void KvCacheImpl::plan_append(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids,
                              const KvAppendOptions& options, AppendPlan& plan) const {
  const char* op = "kv_append";
  // 1. Each sequence's tokens continue at next[seq], one position at a time. expect[s]:
  // the next position expected (-1: no token of s yet); last[s]: s's last position here.
  plan.expect.assign(config.n_seqs, -1);
  plan.last.resize(config.n_seqs);
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const std::int32_t s = seq_ids.empty() ? 0 : seq_ids[t];
    const std::size_t u = check_seq(op, s, "seq_ids", t);
    std::int32_t& expect = plan.expect[u];
    if (expect < 0) expect = next[u];
    if (positions[t] != expect) {
      throw InvalidArgument(
          op, "positions[" + std::to_string(t) + "]", std::to_string(positions[t]),
          std::to_string(expect) + ": sequence " + std::to_string(s) + " continues there (positions must be consecutive)");
    }
    if (expect == INT32_MAX) {
      throw InvalidArgument(op, "positions[" + std::to_string(t) + "]", std::to_string(positions[t]), "< 2^31 - 1");
    }
    ++expect;
    plan.last[u] = positions[t];
  }
  // 2. A sequence's new ring tokens beyond the ring would overwrite each other.
  for (std::size_t s = 0; s < config.n_seqs; ++s) {
    if (plan.expect[s] < 0) continue;
    const std::int32_t first_ring = std::max(next[s], static_cast<std::int32_t>(config.n_sinks));
    const std::int64_t new_ring = std::int64_t{plan.expect[s]} - first_ring;
    if (new_ring > static_cast<std::int64_t>(ring()) && !options.keep_last) {
      throw InvalidArgument(
          op, "positions (sequence " + std::to_string(s) + ")", std::to_string(new_ring) + " new ring tokens",
          "at most capacity - n_sinks = " + std::to_string(ring()) + " per call, or KvAppendOptions::keep_last");
    }
  }
  plan.dst_rows.resize(positions.size());
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const auto s = static_cast<std::size_t>(seq_ids.empty() ? 0 : seq_ids[t]);
    const std::int32_t p = positions[t];
    // With keep_last, a ring token that a later token of the call overwrites is dropped.
    const bool dropped =
        p >= static_cast<std::int32_t>(config.n_sinks) && std::int64_t{plan.last[s]} - p >= static_cast<std::int64_t>(ring());
    plan.dst_rows[t] = dropped ? -1 : static_cast<std::int32_t>(s * config.capacity + slot(p));
  }
  if (config.paged) plan_blocks(plan, true);
}

void KvCacheImpl::apply_append(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids,
                               const AppendPlan& plan) {
  if (config.paged) apply_blocks(plan);
  const std::size_t stride = meta_stride();
  for (std::size_t t = 0; t < positions.size(); ++t) {
    const auto s = static_cast<std::size_t>(seq_ids.empty() ? 0 : seq_ids[t]);
    if (plan.dst_rows[t] >= 0) {
      // A paged cache's dst_rows are rows of its pool: the slot is the table word's.
      const std::size_t slot = config.paged ? static_cast<std::size_t>(plan.meta_rows[t]) - s * stride
                                            : static_cast<std::size_t>(plan.dst_rows[t]) - s * config.capacity;
      set(slot_pos[s * config.capacity + slot], positions[t]);
    }
    set(next[s], positions[t] + 1);
    const std::int64_t held_from = std::int64_t{next[s]} - static_cast<std::int64_t>(ring());
    set(oldest[s], static_cast<std::int32_t>(std::max<std::int64_t>(oldest[s], held_from)));
  }
}

void KvCacheImpl::copy_sequence(std::size_t src, std::size_t dst, const ForkPlan& plan) {
  if (config.paged) fork_blocks(src, dst, plan);
  for (std::size_t i = 0; i < config.capacity; ++i) set(slot_pos[dst * config.capacity + i], slot_pos[src * config.capacity + i]);
  set(next[dst], next[src]);
  set(oldest[dst], oldest[src]);
}

void KvCacheImpl::check_readable(const char* op, std::size_t token, std::size_t seq, std::int32_t position,
                                 const ScoresParams& p) const {
  // The ring positions this query may see start here; those it would need but the ring
  // has overwritten are below oldest[seq].
  const std::int64_t pos = position;
  const std::int64_t lo = std::max(
      {static_cast<std::int64_t>(config.n_sinks), pos - static_cast<std::int64_t>(ring()) + 1, lowest_visible_position(p, pos)});
  // (A query that sees no ring position at all, one at a sink's position, needs none.)
  if (lo < oldest[seq] && lo < next[seq] && position_visible(p, pos, lo)) {
    throw InvalidArgument(op, "tokens.q_positions[" + std::to_string(token) + "]", std::to_string(position),
                          "a position whose keys sequence " + std::to_string(seq) + " still holds: it needs position " +
                              std::to_string(lo) + ", overwritten (the ring holds " + std::to_string(oldest[seq]) +
                              " onwards); append and attend in chunks of at most capacity - n_sinks - window + 1");
  }
}

}  // namespace vkattn::detail

namespace vkattn {

KvCache::KvCache(std::shared_ptr<detail::KvCacheImpl> impl) : impl_(std::move(impl)) {}
KvCache::~KvCache() = default;

detail::KvCacheImpl& detail::live(const std::shared_ptr<KvCacheImpl>& impl, const char* op) {
  if (!impl) throw InvalidArgument(op, "this", kEmptyCache, "a cache made by Backend::kv_cache");
  return *impl;
}

const KvCacheConfig& KvCache::config() const { return detail::live(impl_, "config").config; }
std::size_t KvCache::bytes() const { return (detail::live(impl_, "bytes").k->words + (impl_->v ? impl_->v->words : 0)) * 4; }
std::int32_t KvCache::next_position(std::size_t seq) const {
  const auto& c = detail::live(impl_, "next_position");
  return c.next[c.check_seq("next_position", seq)];
}

std::size_t KvCache::length(std::size_t seq) const {
  const auto& c = detail::live(impl_, "length");
  c.check_seq("length", seq);
  return static_cast<std::size_t>(std::count_if(c.slot_pos.begin() + static_cast<std::ptrdiff_t>(seq * c.config.capacity),
                                                c.slot_pos.begin() + static_cast<std::ptrdiff_t>((seq + 1) * c.config.capacity),
                                                [](std::int32_t p) { return p >= 0; }));
}

std::vector<std::int32_t> KvCache::slot_positions(std::size_t seq) const try {
  const auto& c = detail::live(impl_, "slot_positions");
  c.check_seq("slot_positions", seq);
  const auto begin = c.slot_pos.begin() + static_cast<std::ptrdiff_t>(seq * c.config.capacity);
  return {begin, begin + static_cast<std::ptrdiff_t>(c.config.capacity)};
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("slot_positions");
}

std::size_t KvCache::slot(std::int32_t position) const {
  if (position < 0) throw InvalidArgument("slot", "position", std::to_string(position), "[0, 2^31 - 1]");
  return detail::live(impl_, "slot").slot(position);
}

namespace {

// Changes |seq|'s bookkeeping outside a command list (|change|, writing through set()) and
// writes it to the device; when either fails (out of memory, a lost device), the words
// changed are put back: a failed reset or truncate leaves the cache as it was.
template <class Change>
void change_and_publish(detail::KvCacheImpl& c, std::size_t seq, Change change) {
  std::vector<detail::LoggedWord> log;
  c.journal = &log;
  try {
    change();
    c.journal = nullptr;
    c.publish(seq);
  } catch (...) {
    c.journal = nullptr;
    for (auto it = log.rbegin(); it != log.rend(); ++it) *it->word = it->old;
    throw;
  }
  c.changed(seq);
}

// Refuses |op| on |seq| while a list that has not run touched it (|touched_at|, its tick;
// |valid| says which lists must have run, |why| what the unrun one does to the sequence).
void refuse_while_unrun(const char* op, const detail::KvCacheImpl& c, std::size_t seq, std::uint64_t touched_at,
                        const char* valid, const char* why) {
  if (touched_at <= c.ran_at[seq]) return;
  throw InvalidArgument(op, "seq", std::to_string(seq),
                        std::string(valid) + " have run (a command list that has not run " + why +
                            ": submit it first, or destroy it and the lists recorded after it, newest first)");
}

}  // namespace

void KvCache::reset(std::size_t seq) try {
  detail::OpScope scope("reset");  // names the op in device errors and the log
  auto& c = detail::live(impl_, "reset");
  const detail::CacheInUse use(&c, "reset", "this");
  c.check_seq("reset", seq);
  // A list that has not run and reads the sequence (a fork from it, a copy of a block it
  // shares) could then neither run nor be replayed, and dropping it would mark the
  // sequences it writes. One that writes it is spared (KvCacheImpl::reset_at).
  refuse_while_unrun("reset", c, seq, c.touched[seq].read, "a sequence whose forks, and copies of blocks it shares,", "reads it");
  change_and_publish(c, seq, [&] {
    for (std::size_t s = 0; s < c.config.capacity; ++s) c.set(c.slot_pos[seq * c.config.capacity + s], -1);
    c.set(c.next[seq], 0);
    c.set(c.oldest[seq], static_cast<std::int32_t>(c.config.n_sinks));
    c.release_empty_blocks(seq);
  });
  c.set_unwritten(seq, false);
  c.reset_at[seq] = c.clock;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("reset");
}

void KvCache::truncate(std::size_t seq, std::int32_t position) try {
  detail::OpScope scope("truncate");  // names the op in device errors and the log
  auto& c = detail::live(impl_, "truncate");
  const detail::CacheInUse use(&c, "truncate", "this");
  c.check_seq("truncate", seq);
  // Its positions' rows were never all written: publishing them would give lists recorded
  // before the drop, which read the cache as the device holds it, rows never written.
  if (c.unwritten[seq]) c.refuse_unwritten("truncate", seq, true);
  if (position < 0 || position > c.next[seq]) {
    throw InvalidArgument("truncate", "position", std::to_string(position),
                          "[0, next_position = " + std::to_string(c.next[seq]) + "]");
  }
  // When |position| was next, the ring held [max(n_sinks, position - ring), position).
  const std::int64_t held_then =
      std::max<std::int64_t>(c.config.n_sinks, std::int64_t{position} - static_cast<std::int64_t>(c.ring()));
  if (position > static_cast<std::int32_t>(c.config.n_sinks) && c.oldest[seq] > held_then) {
    throw InvalidArgument("truncate", "position", std::to_string(position),
                          "a position whose earlier keys are still held: positions " + std::to_string(held_then) + " to " +
                              std::to_string(c.oldest[seq] - 1) + " have been overwritten");
  }
  // Positions an unrun list holds would reach the device unwritten; one that reads the
  // sequence (a fork's source, a block it shares that an append copies) could then neither
  // run nor be replayed, and dropping it would mark the sequences it wrote.
  refuse_while_unrun("truncate", c, seq, c.touched[seq].at,
                     "a sequence whose appends and forks, and the forks and copies of blocks it shares that read it,",
                     "holds its positions or reads them");
  change_and_publish(c, seq, [&] {
    for (std::size_t s = 0; s < c.config.capacity; ++s) {
      std::int32_t& p = c.slot_pos[seq * c.config.capacity + s];
      if (p >= position) c.set(p, -1);
    }
    c.set(c.next[seq], position);
    if (position <= static_cast<std::int32_t>(c.config.n_sinks))
      c.set(c.oldest[seq], static_cast<std::int32_t>(c.config.n_sinks));
    c.release_empty_blocks(seq);
  });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("truncate");
}

}  // namespace vkattn
