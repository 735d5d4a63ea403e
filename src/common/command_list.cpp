// The public CommandList ops. Each op checks its arguments here, records through the
// backend's CommandListImpl, and keeps a recipe (its arguments and the same two steps) so
// that set_tokens (command_list_run.cpp) can record the list again with new token data.
// Each entry point turns a host allocation failure below it into Error(out_of_memory)
// naming its op.
#include <algorithm>
#include <new>

#include "common/command_list_impl.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/op_call.hpp"
#include "common/op_scope.hpp"
#include "common/room.hpp"
#include "common/validate.hpp"
#include "vkattn/command_list.hpp"

namespace vkattn {

CommandList::CommandList(std::unique_ptr<detail::CommandListImpl> impl) : impl_(std::move(impl)) {}
CommandList::CommandList(CommandList&&) noexcept = default;
CommandList& CommandList::operator=(CommandList&&) noexcept = default;
CommandList::~CommandList() = default;

namespace {

using detail::CommandListImpl;
using detail::NextTokens;
using Ints = std::vector<std::int32_t>;

using detail::InUse;

Ints copy_of(std::span<const std::int32_t> s) { return Ints(s.begin(), s.end()); }

// What a recipe takes: |n_tokens| > 0 when it takes token data; the cache it advances;
// whether it took sequence ids (a replay's replace them).
struct Takes {
  Takes(std::size_t n = 0, std::shared_ptr<detail::KvCacheImpl> c = nullptr, bool i = false)
      : n_tokens(n), cache(std::move(c)), ids(i) {}
  std::size_t n_tokens;
  std::shared_ptr<detail::KvCacheImpl> cache;
  bool ids;
};

template <class F>
struct RunOf final : detail::Recipe::Run {
  explicit RunOf(F f) : f(std::move(f)) {}
  void operator()(CommandListImpl& impl, const NextTokens* next) override { f(impl, next); }
  F f;
};

// Records |op| now and keeps its recipe. |f| takes the new tokens (null: the ones it was
// given).
template <class F>
void record_op(CommandListImpl& impl, const char* op, Takes takes, F f) {
  detail::OpScope scope(op);  // names the op in device errors (an intermediate past a limit)
  auto& [n_tokens, cache, ids] = takes;
  auto run = std::make_unique<RunOf<F>>(std::move(f));
  // A recorded op always has its recipe: room for it first (doubling, as push_back would).
  detail::reserve_room(impl.recipes, 1);
  // The cache first: the op notes it (CommandListImpl::planned, unrun) before it can fail,
  // and what the list notes it keeps alive.
  const bool new_cache = cache && std::find(impl.caches.begin(), impl.caches.end(), cache) == impl.caches.end();
  if (new_cache) impl.caches.push_back(cache);
  // An op that fails part way (a host allocation) leaves the list's plan as it was: an
  // entry left for it would name a tick no change of the list has, and its submission
  // would count that tick as run.
  impl.pending.clear();  // left by one before it
  const std::size_t n_planned = impl.planned.size();
  const CommandListImpl::Planned last = n_planned ? impl.planned.back() : CommandListImpl::Planned{};
  try {
    (*run)(impl, nullptr);
  } catch (...) {
    impl.planned.erase(impl.planned.begin() + static_cast<std::ptrdiff_t>(n_planned), impl.planned.end());
    if (n_planned) impl.planned.back() = last;
    if (new_cache) impl.caches.pop_back();  // a list over no cache holds none (CachesInUse)
    throw;
  }
  impl.recipes.push_back({std::move(run), sizeof(RunOf<F>), n_tokens, std::move(cache)});
  impl.ids_ops = impl.ids_ops || ids;
  if (n_tokens != 0) {
    impl.fewest_tokens = std::min(impl.fewest_tokens, n_tokens);
    impl.most_tokens = std::max(impl.most_tokens, n_tokens);
  }
}

// AttentionTokens that own their arrays; the queries' positions and sequence ids (those
// given) are replaced by a replay's.
struct OwnedTokens {
  Ints q_pos, k_pos, q_seq, k_seq;
  explicit OwnedTokens(const AttentionTokens& t)
      : q_pos(copy_of(t.q_positions)), k_pos(copy_of(t.k_positions)), q_seq(copy_of(t.q_seq_ids)), k_seq(copy_of(t.k_seq_ids)) {}
  std::size_t n_replaced() const { return std::max(q_pos.size(), q_seq.size()); }
  AttentionTokens view(const NextTokens* next) const {
    AttentionTokens t{q_pos, k_pos, q_seq, k_seq};
    if (next && !q_pos.empty()) t.q_positions = next->positions;
    if (next && !q_seq.empty() && !next->seq_ids.empty()) t.q_seq_ids = next->seq_ids;
    return t;
  }
};

// The tokens a recipe keeps, and how many of them a replay replaces.
std::pair<OwnedTokens, std::size_t> owned(const AttentionTokens& tokens) {
  OwnedTokens own(tokens);
  const std::size_t n = own.n_replaced();
  return {std::move(own), n};
}

std::span<const std::int32_t> positions_of(const NextTokens* next, const Ints& own) {
  return next ? next->positions : std::span<const std::int32_t>(own);
}

// An M-RoPE op's three positions per token: a replay's M-RoPE positions, else its
// positions (t = h = w where one a token came, as text tokens have), else its own.
// |scratch| holds the expanded ones.
std::span<const std::int32_t> mrope_positions_of(const NextTokens* next, const Ints& own, Ints& scratch) {
  if (!next) return own;
  const auto given = next->mrope_positions.empty() ? next->positions : next->mrope_positions;
  if (given.size() != next->positions.size()) return given;  // three a token
  scratch.clear();
  for (std::int32_t p : given) scratch.insert(scratch.end(), {p, p, p});
  return scratch;
}

// The tokens a rope op takes: its positions, three per token with M-RoPE.
std::size_t rope_tokens(std::span<const std::int32_t> positions, const RopeConfig& config) {
  return config.mrope ? positions.size() / 3 : positions.size();
}
std::span<const std::int32_t> seq_ids_of(const NextTokens* next, const Ints& own) {
  return next && !own.empty() && !next->seq_ids.empty() ? next->seq_ids : std::span<const std::int32_t>(own);
}

const std::shared_ptr<detail::KvCacheImpl>& check_cache(const char* op, const KvCache& cache, const void* owner) {
  const auto& impl = detail::check_cache(op, cache, owner, "the backend of this command list");
  impl->check_written(op);
  return impl;
}

// A list's call over a cache: the list and the cache in use for the call (InUse,
// CacheInUse), the cache checked.
// Once the op is recorded (and not when it is refused, or records nothing), the cache
// is one the list was recorded over.
struct OverCache {
  OverCache(const std::unique_ptr<CommandListImpl>& list, const KvCache& c, const char* op)
      : use(list.get(), op), cache_use(c.impl().get(), op), impl(*use), cache(check_cache(op, c, impl.owner())),
        n_recipes(impl.recipes.size()) {
    detail::reserve_room(impl.recorded_over, 1);  // the destructor's push_back cannot throw
  }
  ~OverCache() {
    auto& over = impl.recorded_over;
    if (impl.recipes.size() != n_recipes && std::find(over.begin(), over.end(), cache) == over.end()) over.push_back(cache);
  }
  OverCache(const OverCache&) = delete;
  OverCache& operator=(const OverCache&) = delete;
  const InUse use;
  const detail::CacheInUse cache_use;
  CommandListImpl& impl;
  const std::shared_ptr<detail::KvCacheImpl>& cache;
  std::size_t n_recipes;
};

std::shared_ptr<detail::TensorImpl> optional_tensor(const char* op, const char* param, const Tensor* t, const void* owner) {
  return t ? detail::check_tensor(op, param, *t, owner) : nullptr;
}

}  // namespace

void CommandList::copy(const Tensor& src, Tensor& dst) try {
  const InUse use(impl_.get(), "copy");
  auto& impl = *use;
  const auto& s = detail::check_tensor("copy", "src", src, impl.owner());
  const auto& d = detail::check_tensor("copy", "dst", dst, impl.owner());
  detail::check_copy(*s, *d);
  record_op(impl, "copy", {}, [s, d](auto& i, auto) { i.record(detail::CopyCall{s, d}); });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("copy");
}

namespace {

// rope on |x| alone (null |k|) or on q and k in one dispatch.
void record_rope(CommandListImpl& impl, detail::TensorPtr x, detail::TensorPtr k, std::span<const std::int32_t> positions,
                 const RopeConfig& config) {
  // Checked before the arrays are copied (a count that does not match its array, as a C
  // caller may pass, is refused before anything reads past it); a replay checks its tokens.
  RopeConfig checked = detail::check_rope(*x, k.get(), positions, config);
  record_op(impl, "rope", {rope_tokens(positions, config)},
            [x, k, pos = copy_of(positions), config, checked, scratch = Ints{}](auto& i, auto next) mutable {
              const auto p = config.mrope ? mrope_positions_of(next, pos, scratch) : positions_of(next, pos);
              if (next) detail::check_rope_positions(*x, k.get(), p, checked);
              i.record(detail::RopeCall{x, k, p, checked});
            });
  impl.mrope_ops = impl.mrope_ops || config.mrope.has_value();
}

}  // namespace

void CommandList::rope(Tensor& x, std::span<const std::int32_t> positions, const RopeConfig& config) try {
  const InUse use(impl_.get(), "rope");
  auto& impl = *use;
  record_rope(impl, detail::check_tensor("rope", "x", x, impl.owner()), nullptr, positions, config);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("rope");
}

void CommandList::rope(Tensor& q, Tensor& k, std::span<const std::int32_t> positions, const RopeConfig& config) try {
  const InUse use(impl_.get(), "rope");
  auto& impl = *use;
  auto tq = detail::check_tensor("rope", "q", q, impl.owner());  // q named first
  record_rope(impl, std::move(tq), detail::check_tensor("rope", "k", k, impl.owner()), positions, config);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("rope");
}

void CommandList::attn_scores(const Tensor& q, const Tensor& k, Tensor& scores, const AttentionTokens& tokens,
                              const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attn_scores";
  const InUse use(impl_.get(), op);
  auto& impl = *use;
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& tk = detail::check_tensor(op, "k", k, impl.owner());
  const auto& ts = detail::check_tensor(op, "scores", scores, impl.owner());
  auto tm = optional_tensor(op, "mask", mask, impl.owner());
  detail::check_stage_config(config, op);
  detail::ScoresParams params = detail::check_attn_scores(*tq, *tk, *ts, tm.get(), tokens, config);  // before copying
  detail::check_no_sinks(config);
  auto [own, n] = owned(tokens);
  record_op(impl, op, {n, nullptr, !tokens.q_seq_ids.empty()},
            [tq, tk, ts, tm, own = std::move(own), params = std::move(params)](auto& i, auto next) mutable {
              if (next) detail::check_attn_tokens("attn_scores", params, own.view(next), tq->shape[0], tk->shape[0]);
              i.record(detail::ScoresCall{tq, {tk, nullptr, nullptr}, ts, tm, params});
            });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_scores");
}

void CommandList::attn_softmax(const Tensor& scores, Tensor& probs, const AttentionConfig& config) try {
  const InUse use(impl_.get(), "attn_softmax");
  auto& impl = *use;
  const auto& ts = detail::check_tensor("attn_softmax", "scores", scores, impl.owner());
  const auto& tp = detail::check_tensor("attn_softmax", "probs", probs, impl.owner());
  detail::check_stage_config(config, "attn_softmax");
  record_op(impl, "attn_softmax", {}, [ts, tp, sinks = detail::check_attn_softmax(*ts, *tp, config)](auto& i, auto) {
    i.record(detail::SoftmaxCall{ts, tp, sinks});
  });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_softmax");
}

void CommandList::attn_weighted_sum(const Tensor& probs, const Tensor& v, Tensor& out) try {
  const char* op = "attn_weighted_sum";
  const InUse use(impl_.get(), op);
  auto& impl = *use;
  const auto& tp = detail::check_tensor(op, "probs", probs, impl.owner());
  const auto& tv = detail::check_tensor(op, "v", v, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  detail::check_attn_weighted_sum(*tp, *tv, *to);
  record_op(impl, op, {}, [tp, tv, to](auto& i, auto) {
    static const Ints no_seq;
    i.record(detail::WeightedSumCall{tp, {nullptr, tv, nullptr}, to, no_seq});
  });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_weighted_sum");
}

namespace {

// An attention op's call over |kv| with its checked arguments (which it refers to: record
// it at once).
detail::AttentionCall attention_call(const detail::TensorPtr& q, detail::KvSource kv, const detail::TensorPtr& out,
                                     const detail::TensorPtr& mask, const detail::AttentionArgs& a) {
  return {q, std::move(kv), out, mask, a.scores, a.sinks, a.path, a.precision, a.mask_keys, a.key_list};
}

// The sequences an op over |c| reads (its queries'; none given: sequence 0), noted for the
// order the lists run in (CommandListImpl::check_planned); |keys|: it reads the keys, which
// a cache with sinks and KvRope::on_read rotates by their places in the ring.
void note_reads(CommandListImpl& i, detail::KvCacheImpl& c, std::span<const std::int32_t> q_seq, bool keys) {
  const bool ring = keys && c.config.rope == KvRope::on_read && c.config.n_sinks > 0;
  const auto note = [&](std::size_t seq) {
    i.note_read(c, seq);
    if (ring) i.note_ring(c, seq);
  };
  if (q_seq.empty()) return note(0);
  for (std::size_t t = 0; t < q_seq.size(); ++t) {
    if (t == 0 || q_seq[t] != q_seq[t - 1]) note(static_cast<std::size_t>(q_seq[t]));
  }
}

// While an append or a fork is applied, its cache's bookkeeping writes go to the list's
// log (CommandListImpl::words and touches), room for |most| words made before the op is
// recorded, so that once it is, logging it cannot fail; a replay's (set_tokens) too, whose
// journal is the same log (a replay taking blocks the recording did not logs more words:
// 0.14.8). The log starts (begin_unrun) only once the op is recorded: an op that
// fails before leaves the cache's log as it was, and no log where the list had none, so
// the list keeps no cache alive that no op of it advanced (0.14.3: destroying it read the
// log's cache after the caller freed it).
class Logged {
 public:
  Logged(CommandListImpl& impl, detail::KvCacheImpl& cache, std::size_t most)
      : impl_(impl), cache_(cache), taken_(cache.blocks_taken), freed_(cache.blocks_freed) {
    impl.make_room();
    auto& words = impl.words;
    detail::reserve_room(words, most);
    n_logs_ = impl.logs.size();
    log_ = impl.log_of(cache);  // the last allocation
  }
  ~Logged() {
    if (owns_) cache_.journal = nullptr, cache_.touch_journal = nullptr;
    if (!applied_ && impl_.logs.size() > n_logs_) impl_.logs.pop_back();
  }
  // The op recorded, |apply| changes the cache's bookkeeping (within the room made: it
  // cannot fail).
  template <class F>
  void apply(F apply) noexcept {
    applied_ = true;
    impl_.begin_unrun(impl_.logs[log_]);
    const std::size_t size = impl_.words.size();
    if (!cache_.journal) {
      cache_.journal = &impl_.words;
      cache_.touch_journal = &impl_.touches;
      cache_.journal_log = log_;
      owns_ = true;
    }
    apply();
    // An op that changed no word (a fork between equal sequences) still builds on the
    // unrun changes of the sequences it touches (it copies or writes their rows as they
    // will be): no list that made them may put them back before it.
    const bool wrote = impl_.words.size() != size;
    if (wrote || impl_.touches_unrun(cache_)) cache_.last_writer = impl_.id;
    ++cache_.clock;
    impl_.touch_pending(cache_, log_, cache_.blocks_taken != taken_, cache_.blocks_freed != freed_);
    if (wrote) impl_.logs[log_].wrote = true;
  }
  Logged(const Logged&) = delete;
  Logged& operator=(const Logged&) = delete;

 private:
  CommandListImpl& impl_;
  detail::KvCacheImpl& cache_;
  std::uint64_t taken_, freed_;
  std::size_t n_logs_ = 0;
  std::uint32_t log_ = 0;
  bool owns_ = false, applied_ = false;
};

// kv_append with |v|, or without it (null) for a latent cache.
void record_kv_append(const OverCache& over, const Tensor& k, const Tensor* v, std::span<const std::int32_t> positions,
                      std::span<const std::int32_t> seq_ids, const KvAppendOptions& options) {
  const char* op = "kv_append";
  CommandListImpl& impl = over.impl;
  const auto& c = over.cache;
  if (c->config.latent && v) {
    throw InvalidArgument(op, "v", "a tensor", "none: a latent cache stores V inside K: call kv_append(cache, k, positions)");
  }
  if (!c->config.latent && !v) {
    throw InvalidArgument(
        op, "v", "none (K alone)",
        "a tensor [n_tokens, n_kv_heads, v_head_dim]: only a latent cache (KvCacheConfig::latent) takes K alone");
  }
  const auto& tk = detail::check_tensor(op, "k", k, impl.owner());
  const auto tv = optional_tensor(op, "v", v, impl.owner());
  detail::check_kv_append(*c, *tk, tv.get(), positions, seq_ids);  // before copying
  auto run = [c, tk, tv, pos = copy_of(positions), seq = copy_of(seq_ids), options, plan = detail::KvCacheImpl::AppendPlan{}](
                 CommandListImpl& i, const NextTokens* next) mutable {
    const auto p = positions_of(next, pos), s = seq_ids_of(next, seq);
    if (next) detail::check_kv_append_tokens(*c, *tk, p, s);
    c->plan_append(p, s, options, plan);
    for (std::size_t t = 0; t < p.size(); ++t) i.note_planned(*c, s.empty() ? 0 : static_cast<std::size_t>(s[t]));
    // A copy-on-write copies its block as the sequences sharing it hold it when the list
    // runs: they count as read, as a fork's source does, so that a change of theirs before
    // the list runs, or runs again, is refused rather than copied into this sequence (the
    // sequences the op writes are noted as written already).
    const auto written = [&](std::size_t holder) {
      return s.empty() ? holder == 0 : std::find(s.begin(), s.end(), static_cast<std::int32_t>(holder)) != s.end();
    };
    for (std::size_t k = 0; k < plan.copies.size(); k += 2) {
      c->for_each_holder(plan.copies[k], [&](std::size_t holder) {
        if (!written(holder)) i.note_planned(*c, holder, CommandListImpl::Access::read);
      });
    }
    // Per token its slot, next and oldest; per block taken a table entry, its count, and
    // an old block's count and free-list entry; the free count.
    Logged logged(i, *c, 3 * p.size() + 5 * plan.changes.size() / 2 + 1);
    i.record(detail::AppendCall{c, tk, tv, plan.dst_rows, p, plan.meta_rows, plan.copies});
    logged.apply([&] { c->apply_append(p, s, plan); });
  };
  record_op(impl, op, {positions.size(), c, !seq_ids.empty()}, std::move(run));
}

}  // namespace

void CommandList::kv_append(KvCache& cache, const Tensor& k, const Tensor& v, std::span<const std::int32_t> positions,
                            std::span<const std::int32_t> seq_ids, const KvAppendOptions& options) try {
  record_kv_append(OverCache(impl_, cache, "kv_append"), k, &v, positions, seq_ids, options);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_append");
}

void CommandList::kv_append(KvCache& cache, const Tensor& k, std::span<const std::int32_t> positions,
                            std::span<const std::int32_t> seq_ids, const KvAppendOptions& options) try {
  record_kv_append(OverCache(impl_, cache, "kv_append"), k, nullptr, positions, seq_ids, options);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_append");
}

void CommandList::kv_copy_sequence(KvCache& cache, std::size_t src, std::size_t dst) try {
  const char* op = "kv_copy_sequence";
  const OverCache over(impl_, cache, op);
  auto& impl = over.impl;
  const auto& c = over.cache;
  c->check_seq(op, src, "src");
  c->check_seq(op, dst, "dst");
  if (src == dst) return;
  record_op(impl, op, {0, c}, [c, src, dst](auto& i, auto) {
    const detail::KvCacheImpl::ForkPlan fork = c->plan_copy_sequence(src, dst);
    using Access = CommandListImpl::Access;
    i.note_planned(*c, src, Access::read);  // not written: unmarked should the list never run
    i.note_planned(*c, dst, c->config.paged ? Access::replace : Access::write);
    // Each slot, next and oldest; per block of dst a table entry and a dropped count (with
    // its free-list entry and the free count); per block of src a table entry and a count.
    Logged logged(i, *c, c->config.capacity + 2 + 7 * c->entries);
    i.record(detail::CopySequenceCall{c, src, dst, fork});
    logged.apply([&] { c->copy_sequence(src, dst, fork); });
  });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_copy_sequence");
}

void CommandList::attn_scores(const Tensor& q, const KvCache& cache, Tensor& scores, const AttentionTokens& tokens,
                              const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attn_scores";
  const OverCache over(impl_, cache, op);
  auto& impl = over.impl;
  const auto& c = over.cache;
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& ts = detail::check_tensor(op, "scores", scores, impl.owner());
  auto tm = optional_tensor(op, "mask", mask, impl.owner());
  detail::check_stage_config(config, op);
  detail::ScoresParams params = detail::check_attn_scores_cache(*tq, *c, *ts, tm.get(), tokens, config);  // before copying
  detail::check_no_sinks(config);
  auto [own, n] = owned(tokens);
  record_op(impl, op, {n, nullptr, !tokens.q_seq_ids.empty()},
            [c, tq, ts, tm, own = std::move(own), params = std::move(params)](auto& i, auto next) mutable {
              if (next) detail::check_attn_cache_tokens("attn_scores", params, *c, own.view(next), tq->shape[0]);
              note_reads(i, *c, own.view(next).q_seq_ids, true);
              i.record(detail::ScoresCall{tq, {nullptr, nullptr, c}, ts, tm, params});
            });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_scores");
}

void CommandList::attn_weighted_sum(const Tensor& probs, const KvCache& cache, Tensor& out, const AttentionTokens& tokens) try {
  const char* op = "attn_weighted_sum";
  const OverCache over(impl_, cache, op);
  auto& impl = over.impl;
  const auto& c = over.cache;
  const auto& tp = detail::check_tensor(op, "probs", probs, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  Ints q_seq = detail::check_attn_weighted_sum_cache(*tp, *c, *to, tokens);  // before copying
  auto [own, n] = owned(tokens);
  record_op(impl, op, {n, nullptr, !tokens.q_seq_ids.empty()},
            [c, tp, to, own = std::move(own), q_seq = std::move(q_seq)](auto& i, auto next) mutable {
              if (next) q_seq = detail::check_attn_weighted_sum_cache(*tp, *c, *to, own.view(next));
              note_reads(i, *c, own.view(next).q_seq_ids, false);
              i.record(detail::WeightedSumCall{tp, {nullptr, nullptr, c}, to, q_seq});
            });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attn_weighted_sum");
}

void CommandList::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const AttentionTokens& tokens,
                            const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attention";
  const InUse use(impl_.get(), op);
  auto& impl = *use;
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& tk = detail::check_tensor(op, "k", k, impl.owner());
  const auto& tv = detail::check_tensor(op, "v", v, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  auto tm = optional_tensor(op, "mask", mask, impl.owner());
  detail::AttentionArgs a = detail::check_attention(*tq, *tk, *tv, *to, tm.get(), tokens, config);  // before copying
  auto [own, n] = owned(tokens);
  record_op(impl, op, {n, nullptr, !tokens.q_seq_ids.empty()},
            [tq, tk, tv, to, tm, own = std::move(own), a = std::move(a)](auto& i, auto next) mutable {
              if (next) detail::check_attn_tokens("attention", a.scores, own.view(next), tq->shape[0], tk->shape[0]);
              i.record(attention_call(tq, {tk, tv, nullptr}, to, tm, a));
            });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attention");
}

void CommandList::attention(const Tensor& q, const KvCache& cache, Tensor& out, const AttentionTokens& tokens,
                            const AttentionConfig& config, const Tensor* mask) try {
  const char* op = "attention";
  const OverCache over(impl_, cache, op);
  auto& impl = over.impl;
  const auto& c = over.cache;
  const auto& tq = detail::check_tensor(op, "q", q, impl.owner());
  const auto& to = detail::check_tensor(op, "out", out, impl.owner());
  auto tm = optional_tensor(op, "mask", mask, impl.owner());
  detail::AttentionArgs a = detail::check_attention_cache(*tq, *c, *to, tm.get(), tokens, config);  // before copying
  auto [own, n] = owned(tokens);
  record_op(impl, op, {n, nullptr, !tokens.q_seq_ids.empty()},
            [c, tq, to, tm, own = std::move(own), a = std::move(a)](auto& i, auto next) mutable {
              if (next) detail::check_attn_cache_tokens("attention", a.scores, *c, own.view(next), tq->shape[0]);
              note_reads(i, *c, own.view(next).q_seq_ids, true);
              i.record(attention_call(tq, {nullptr, nullptr, c}, to, tm, a));
            });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("attention");
}

}  // namespace vkattn
