// What a command list knows of the caches its ops advance, whatever the backend: the
// sequences they planned (refused after a later reset: check_planned) and the bookkeeping
// words they changed before the list ran (put back when it is destroyed unrun).
#include "common/command_list_impl.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "common/kv_cache_impl.hpp"
#include "vkattn/error.hpp"

namespace vkattn::detail {

namespace {
std::uint64_t next_list_id() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}
}  // namespace

CommandListImpl::CommandListImpl() : id(next_list_id()) {}

CommandListImpl::~CommandListImpl() { undo_unrun(); }

void CommandListImpl::note_planned(KvCacheImpl& cache, std::size_t seq) {
  Unrun& u = unrun_of(cache);
  if (u.latest.size() < cache.config.n_seqs) u.latest.resize(cache.config.n_seqs, 0);
  if (u.latest[seq] == 0) u.seqs.push_back(seq);
  u.latest[seq] = cache.clock + 1;                                                              // the op's tick (Logged::applied)
  if (!planned.empty() && planned.back().cache == &cache && planned.back().seq == seq) return;  // a run of tokens
  planned.push_back({&cache, seq, cache.changes});
}

void CommandListImpl::check_planned(const char* op) const {
  for (const Planned& p : planned) {
    if (p.cache->unwritten[p.seq]) p.cache->check_written(op);
    if (p.cache->changed_at[p.seq] > p.at) {
      throw InvalidArgument(op, "this",
                            "a list whose kv_append or kv_copy_sequence into sequence " + std::to_string(p.seq) +
                                " was recorded before that sequence's reset, truncate or restore_cache",
                            "a list recorded again, or replayed with set_tokens, after the change");
    }
  }
}

CommandListImpl::Unrun& CommandListImpl::unrun_of(KvCacheImpl& cache) {
  if (cache.hint_list != id || cache.hint_slot >= unrun.size() || unrun[cache.hint_slot].cache != &cache) {
    const auto it = std::find_if(unrun.begin(), unrun.end(), [&](const Unrun& u) { return u.cache == &cache; });
    cache.hint_list = id;
    cache.hint_slot = static_cast<std::size_t>(it - unrun.begin());
    if (it == unrun.end()) unrun.push_back(Unrun{&cache, false, 0, 0, 0, {}, {}, {}});
  }
  return begin_unrun(unrun[cache.hint_slot]);
}

CommandListImpl::Unrun& CommandListImpl::begin_unrun(Unrun& u) {
  const KvCacheImpl& cache = *u.cache;
  if (!u.started) {
    u.started = true;
    u.since = cache.changes;
    u.writer = cache.last_writer;
    u.first_clock = cache.clock;
  } else if (u.since != cache.changes || (!u.words.empty() && cache.last_writer != id)) {
    u.since = kStale;  // a change outside lists, or another list's op, came after the list's
  }
  if (u.words.size() > kMostUnrunWords && !cache.journal) {
    u.since = kStale;
    u.words.clear();
  }
  return u;
}

void CommandListImpl::ran() noexcept {
  for (Unrun& u : unrun) {
    for (std::size_t seq : u.seqs) u.latest[seq] = 0;
    u.seqs.clear();
    u.words.clear();
    u.started = false;
  }
}

namespace {

// |u|'s sequences not reset since the list's last op on them, and those forked from a
// marked one since the list began and not reset since, marked unwritten (with any marked
// before: the set only grows).
void mark_unwritten(KvCacheImpl& c, const CommandListImpl::Unrun& u) noexcept {
  for (std::size_t seq : u.seqs) {
    if (c.reset_at[seq] < u.latest[seq]) c.unwritten[seq] = 1;
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t d = 0; d < c.config.n_seqs; ++d) {
      const auto [src, at] = c.forked_from[d];
      if (c.unwritten[d] || src < 0 || at <= u.first_clock || c.reset_at[d] >= at) continue;
      if (c.unwritten[static_cast<std::size_t>(src)]) c.unwritten[d] = grew = true;
    }
  }
}

}  // namespace

void CommandListImpl::undo_unrun() noexcept {
  for (Unrun& u : unrun) {
    KvCacheImpl& c = *u.cache;
    if (u.words.empty()) continue;
    if (u.since == c.changes && c.last_writer == id) {
      for (auto it = u.words.rbegin(); it != u.words.rend(); ++it) *it->first = it->second;
      c.last_writer = u.writer;
      continue;
    }
    mark_unwritten(c, u);
  }
  ran();
}

}  // namespace vkattn::detail
