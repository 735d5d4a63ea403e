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
  if (!planned.empty() && planned.back().cache == &cache && planned.back().seq == seq) return;  // a run of tokens
  planned.push_back({&cache, seq, cache.changes});
  std::vector<std::size_t>& seqs = unrun_of(cache).seqs;
  if (std::find(seqs.begin(), seqs.end(), seq) == seqs.end()) seqs.push_back(seq);
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
  auto it = std::find_if(unrun.begin(), unrun.end(), [&](const Unrun& u) { return u.cache == &cache; });
  if (it == unrun.end()) {
    unrun.push_back(Unrun{&cache, 0, 0, 0, {}, {}});
    it = unrun.end() - 1;
  }
  if (it->words.empty() && it->seqs.empty()) {
    it->first = it->since = cache.changes;
    it->writer = cache.last_writer;
  } else if (it->since != cache.changes) {
    it->since = kStale;  // a reset, truncate or restore came between the list's ops
  }
  return *it;
}

void CommandListImpl::ran() noexcept {
  for (Unrun& u : unrun) {
    u.words.clear();
    u.seqs.clear();
  }
}

void CommandListImpl::undo_unrun() noexcept {
  for (Unrun& u : unrun) {
    KvCacheImpl& c = *u.cache;
    if (u.words.empty()) continue;
    if (u.since == c.changes && c.last_writer == id) {
      for (auto it = u.words.rbegin(); it != u.words.rend(); ++it) *it->first = it->second;
      c.last_writer = u.writer;
      continue;
    }
    // Later changes built on these words: the sequences are marked instead, unless a
    // reset, truncate or restore since took them in hand.
    for (std::size_t seq : u.seqs) {
      if (c.changed_at[seq] <= u.first) c.unwritten[seq] = 1;
    }
  }
  ran();
}

}  // namespace vkattn::detail
