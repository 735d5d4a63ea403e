// What a command list knows of the caches its ops advance, whatever the backend: the
// sequences they planned (refused after a later reset: check_planned) and the bookkeeping
// words they changed before the list ran (put back when it is destroyed unrun).
#include "common/command_list_impl.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "common/kv_cache_impl.hpp"
#include "common/room.hpp"
#include "vkattn/error.hpp"

namespace vkattn::detail {

namespace {

// set_tokens replays only a list whose appends and forks have run (CommandList::set_tokens);
// lists destroyed newest first put back what nothing later built on (undo_unrun).
constexpr const char* kRecordAgain =
    "a list recorded again after the change (destroyed first, after the lists recorded since: newest first), or "
    "replayed with set_tokens after it if its appends and forks have run";

std::uint64_t next_list_id() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}
}  // namespace

CommandListImpl::CommandListImpl() : id(next_list_id()) {}

CommandListImpl::~CommandListImpl() { undo_unrun(); }

void CommandListImpl::note_planned(KvCacheImpl& cache, std::size_t seq, Access access) {
  const bool writes = access != Access::read;
  const std::uint64_t tick = cache.clock + 1;  // the op's (Logged::apply)
  const SeqTouch& t = cache.touched[seq];
  // A run of ops on one sequence keeps one entry, unless another list or a change touched
  // it since: a dropped list's entry counts as run once what it waits for has, so one
  // entry must not wait for what came after its first tick (0.14.2: two lists dropped
  // could each wait for the other, and the sequence's reset was refused for good).
  Planned* p = planned.empty() ? nullptr : &planned.back();
  if (!p || p->cache != &cache || p->seq != seq || !p->last || p->ran || (t.by != id && t.at > p->last)) {
    // After ops on other sequences, the list's own earlier entry on this one: it waits for
    // what that one waits for (0.14.2: once dropped it counted as run before them).
    std::uint64_t own = 0;
    if (t.by == id && t.at > cache.ran_at[seq]) {
      const auto it = std::find_if(planned.rbegin(), planned.rend(),
                                   [&](const Planned& e) { return e.cache == &cache && e.seq == seq && e.last && !e.ran; });
      if (it != planned.rend()) own = it->need;
    }
    p = &planned.emplace_back(Planned{&cache, seq, cache.changes, own});
    p->first = tick;
  }
  if (t.by != id) p->need = std::max(p->need, t.at);
  p->last = tick;
  p->writes = p->writes || writes;
  if (!writes && !p->read_first) p->read_first = tick;
  if (pending.empty() || pending.back().seq != seq) {
    pending.push_back({seq, !writes, writes, access == Access::replace});
  } else {
    PendingSeq& e = pending.back();
    e.reads = e.reads || !writes;
    e.writes = e.writes || writes;
    e.replaces = e.replaces || access == Access::replace;
  }
}

void CommandListImpl::note_read(KvCacheImpl& cache, std::size_t seq) {
  const SeqTouch& t = cache.touched[seq];
  if (t.by == id || t.at <= cache.ran_at[seq]) return;  // its own, or run: nothing to wait for
  const Planned* p = planned.empty() ? nullptr : &planned.back();
  if (p && p->cache == &cache && p->seq == seq && p->need == t.at && !p->ran) return;
  planned.push_back({&cache, seq, cache.changes, t.at});
}

void CommandListImpl::note_ring(KvCacheImpl& cache, std::size_t seq) {
  Planned p{&cache, seq, cache.changes};
  p.oldest = cache.oldest[seq];
  p.read_at = cache.clock;
  planned.push_back(p);
}

void CommandListImpl::make_room() {
  // The free list's entries (a read, a change), the touches and their log.
  reserve_room(planned, 2);
  const std::size_t most = pending.size() + 1;
  reserve_room(touches, most);
  reserve_room(pending, 1);
  reserve_room(marks, most);
}

void CommandListImpl::note_rewrite(const KvCacheImpl& cache, std::size_t seq, bool replaces) noexcept {
  const SeqTouch& t = cache.touched[seq];
  if (t.by != id) return;                 // another list's change came between: check_planned refuses for that
  const bool reread = t.read >= t.since;  // read by the list since that change
  if (!reread && !replaces) return;
  for (Planned& e : planned) {
    if (e.cache != &cache || e.seq != seq || !e.last) continue;
    if (reread && e.read_first && !e.write_after) e.write_after = cache.clock;
    if (replaces && e.writes && e.first < cache.clock && !e.replaced_after) e.replaced_after = cache.clock;
  }
}

bool CommandListImpl::touches_unrun(const KvCacheImpl& cache) const noexcept {
  return std::any_of(pending.begin(), pending.end(),
                     [&](const PendingSeq& p) { return cache.touched[p.seq].at > cache.ran_at[p.seq]; });
}

void CommandListImpl::touch_pending(KvCacheImpl& cache, std::uint32_t log, bool took, bool freed) noexcept {
  const std::size_t pool = cache.config.n_seqs;
  if (took) note_read(cache, pool);  // never throws: make_room
  if (freed) {
    planned.push_back(
        {&cache, pool, cache.changes, cache.touched[pool].by != id ? cache.touched[pool].at : 0, cache.clock, cache.clock});
    pending.push_back({pool, false, false, false});
  }
  CacheLog& l = logs[log];
  for (const PendingSeq& p : pending) {
    if (p.writes) note_rewrite(cache, p.seq, p.replaces);
    cache.touch(p.seq, id, p.reads);
    if (!p.writes) continue;
    // Marked with the op's tick (the clock has just moved to it); room made (make_room), and
    // merging moves nothing out of it.
    if (l.last_mark < marks.size() && marks[l.last_mark].seq == p.seq) {
      marks[l.last_mark].latest = cache.clock;
      continue;
    }
    if (marks.size() >= merge_marks_at) merge_marks();
    l.last_mark = marks.size();
    marks.push_back({log, static_cast<std::uint32_t>(p.seq), cache.clock});
  }
  pending.clear();
}

void CommandListImpl::merge_marks() {
  // One entry per sequence of each cache, its latest: undo_unrun asks only whether a
  // sequence was reset before the list's last op on it.
  std::sort(marks.begin(), marks.end(), [](const SeqMark& a, const SeqMark& b) {
    return a.log != b.log ? a.log < b.log : a.seq != b.seq ? a.seq < b.seq : a.latest > b.latest;
  });
  marks.erase(std::unique(marks.begin(), marks.end(),
                          [](const SeqMark& a, const SeqMark& b) { return a.log == b.log && a.seq == b.seq; }),
              marks.end());
  for (CacheLog& l : logs) l.last_mark = SIZE_MAX;
  merge_marks_at = std::max(merge_marks_at, 2 * marks.size());
}

void CommandListImpl::check_planned(const char* op) const {
  for (const Planned& p : planned) {
    const KvCacheImpl& c = *p.cache;
    // A list recorded before a drop that marked a sequence, and only reading the cache,
    // reads it as the device holds it (without the dropped rows), unless it rotates keys
    // by a ring the dropped list moved.
    if (p.last || p.oldest >= 0) c.check_written(op);
    if (p.oldest >= 0) {
      // Moved by a change that has run since (a change outside lists, another list's
      // append, or the list's own later one when it ran before), or back by a list put back
      // that had moved it before the op: lists recorded later and not run yet, and the
      // list's own later appends before it runs, move it after the op.
      if ((c.oldest[p.seq] != p.oldest && c.ran_at[p.seq] > p.read_at) || c.put_back[p.seq].covers(p.read_at)) {
        throw InvalidArgument(op, "this",
                              "a list whose attention over a cache with sinks and KvRope::on_read was planned with "
                              "sequence " +
                                  std::to_string(p.seq) + "'s ring starting at position " + std::to_string(p.oldest) + ", now " +
                                  std::to_string(c.oldest[p.seq]) +
                                  " (it rotates by places in the ring as they were; the sinks keep theirs)",
                              kRecordAgain);
      }
      continue;
    }
    const bool sequence = p.seq < c.config.n_seqs, writes = p.last != 0;
    // Built only for a message: every submission and replay checks each entry.
    const auto what = [&] { return sequence ? "sequence " + std::to_string(p.seq) : std::string("free list of blocks"); };
    if (sequence && writes && c.changes != p.at && c.changed_at[p.seq] > p.at) {
      throw InvalidArgument(op, "this",
                            std::string("a list whose kv_append or kv_copy_sequence ") + (p.writes ? "into " : "reading ") +
                                what() + " was recorded before that sequence's reset, truncate or restore_cache",
                            kRecordAgain);
    }
    if (p.need > c.ran_at[p.seq]) {
      throw InvalidArgument(op, "this",
                            std::string("a list whose ops on a ") + (sequence ? "cache's " : "paged cache's ") + what() +
                                " were recorded after another list's kv_append or kv_copy_sequence there (or its "
                                "copy of a block the sequence shares), which has not run",
                            "the lists submitted in the order they were recorded");
    }
    if (!sequence || !writes || !p.ran) continue;
    if (c.touched[p.seq].by != id || c.touched[p.seq].since > p.first) {
      throw InvalidArgument(op, "this",
                            "a list that ran, submitted again after another list's kv_append or kv_copy_sequence "
                            "changed " +
                                what() + ", which its kv_append or kv_copy_sequence " +
                                (p.writes ? "writes" : "reads (a fork's source, or a block it shares that an append copies)"),
                            kRecordAgain);
    }
    // A later op of its own that has run since changed the sequence under this one: run
    // again, this op would read the later one's rows (0.14.2: a fork's destination got a
    // position the host did not count), or write blocks the sequence no longer holds.
    const bool reread = p.write_after && p.write_after <= c.ran_at[p.seq];
    if (reread || (p.replaced_after && p.replaced_after <= c.ran_at[p.seq])) {
      throw InvalidArgument(op, "this",
                            reread ? "a list that ran, submitted again: an op of it reads " + what() +
                                         " (a fork's source, or a block it shares that an append copies), which a later "
                                         "op of it changes (run again, the earlier op would read the later one's rows)"
                                   : "a list that ran, submitted again: an op of it writes " + what() +
                                         " of a paged cache, whose blocks a later kv_copy_sequence of it replaces (run "
                                         "again, the earlier op would write blocks the sequence no longer holds)",
                            "the list replayed with set_tokens, or recorded again");
    }
  }
}

std::uint32_t CommandListImpl::log_of(KvCacheImpl& cache) {
  if (cache.hint_list != id || cache.hint_slot >= logs.size() || logs[cache.hint_slot].cache != &cache) {
    const auto it = std::find_if(logs.begin(), logs.end(), [&](const CacheLog& l) { return l.cache == &cache; });
    cache.hint_list = id;
    cache.hint_slot = static_cast<std::size_t>(it - logs.begin());
    if (it == logs.end()) logs.push_back(CacheLog{&cache});
  }
  return static_cast<std::uint32_t>(cache.hint_slot);
}

void CommandListImpl::begin_unrun(CacheLog& l) noexcept {
  const KvCacheImpl& cache = *l.cache;
  // A log whose ops changed no word yet (a fork between equal sequences) starts again: what
  // other lists wrote in between is not built on it, and destroying the list must give
  // the cache back to the last of them (0.14.2: it gave it to the one before, which was
  // then put back under a list that had built on it).
  if (!l.started || !l.wrote) {
    // Where the list's own earlier op claimed the cache (it built on another list's unrun
    // changes), the writer before that claim stays: the list is put back to it, not to
    // itself (0.14.3: the list before was then marked rather than put back).
    if (!l.started || cache.last_writer != id) l.writer = cache.last_writer;
    l.started = true;
    l.wrote = false;
    l.since = cache.changes;
    l.first_clock = cache.clock;
    l.touch_from = touches.size();  // its earlier ops' touches stay: they changed nothing to put back
  } else if (l.since != cache.changes || (l.wrote && cache.last_writer != id)) {
    l.since = kStale;  // a change outside lists, or another list's op, came after the list's
  }
  if (cache.journal || words.size() <= kMostUnrunWords) return;
  for (CacheLog& each : logs) each.since = kStale;  // the words dropped: every cache's sequences marked
  words.clear();
  touches.clear();
}

void CommandListImpl::save_unrun() {
  UnrunState& s = saved_unrun;
  s.logs.assign(logs.begin(), logs.end());
  s.marks.assign(marks.begin(), marks.end());
}

void CommandListImpl::restore_unrun() noexcept {
  // Each vector only grew (or merged) since: within its capacity, no allocation.
  const UnrunState& s = saved_unrun;
  logs.assign(s.logs.begin(), s.logs.end());
  marks.assign(s.marks.begin(), s.marks.end());
}

void CommandListImpl::ran() noexcept {
  for (Planned& p : planned) {
    if (p.last) p.cache->ran_to(p.seq, p.last);
    p.ran = true;
  }
  forget_unrun();
}

void CommandListImpl::forget_unrun() noexcept {
  for (CacheLog& l : logs) {
    l.started = false;
    l.last_mark = SIZE_MAX;
  }
  words.clear();
  touches.clear();
  marks.clear();
}

void CommandListImpl::undo_unrun() noexcept {
  bool any = false;
  for (std::uint32_t i = 0; i < logs.size(); ++i) {
    CacheLog& l = logs[i];
    l.undo = false;
    if (!l.started) continue;
    KvCacheImpl& c = *l.cache;
    // Where its ops changed no word (a fork between equal or empty sequences) there is
    // nothing to put back.
    if (l.wrote && l.since == c.changes && c.last_writer == id) {
      l.undo = any = true;
      c.last_writer = l.writer;
      l.undone_at = ++c.clock;
    } else if (l.wrote) {
      // Its changes stay as the host planned them: the sequences it wrote, not reset since
      // its last op on them, are marked unwritten (with any marked before: the set only
      // grows).
      for (const SeqMark& m : marks) {
        if (m.log == i && c.reset_at[m.seq] < m.latest) c.set_unwritten(m.seq, true);
      }
    } else if (c.last_writer == id) {
      c.last_writer = l.writer;  // what its ops read was not read: the list before may be put back
    }
    // Put back or not, it will never run: lists planned after it wait only for what it
    // waited for (they waited for ever before; a fork's source, a paged cache's pool).
    for (const Planned& p : planned) {
      if (p.cache == &c && p.last && !p.ran) c.drop_planned(p.seq, p.need, p.last);
    }
  }
  if (any) {
    for (auto it = words.rbegin(); it != words.rend(); ++it) {
      const CacheLog& l = logs[it->log];
      if (!l.undo) continue;
      // A ring start it moved moves back: attention planned on the moved one, after the
      // list's first op and before now, would read the ring at other angles.
      KvCacheImpl& c = *l.cache;
      const std::less<const std::int32_t*> before;
      if (*it->word != it->old && !before(it->word, c.oldest.data()) && before(it->word, c.oldest.data() + c.oldest.size())) {
        const auto seq = static_cast<std::size_t>(it->word - c.oldest.data());
        c.put_back[seq].add(l.first_clock, l.undone_at - 1, c.ran_at[seq]);
      }
      *it->word = it->old;
    }
    for (std::size_t t = touches.size(); t-- > 0;) {
      const CacheLog& l = logs[touches[t].log];
      if (l.undo && t >= l.touch_from) *touches[t].touch = touches[t].old;
    }
  }
  forget_unrun();
}

}  // namespace vkattn::detail
