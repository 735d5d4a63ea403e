// The public CommandList members that run a recorded list: set_tokens, which records the
// list again with new token data through each op's recipe (command_list.cpp), the
// submission, and what a list reports. Each entry point turns a host allocation failure
// below it into Error(out_of_memory) naming itself.
#include <new>
#include <string>
#include <vector>

#include "common/command_list_impl.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/op_scope.hpp"
#include "common/validate.hpp"
#include "vkattn/command_list.hpp"

namespace vkattn {

namespace {

using detail::CommandListImpl;
using detail::InUse;
using detail::NextTokens;

// Asks for |bytes| at |p| to be brought into the CPU caches (a hint; nothing where the
// compiler has no prefetch).
void prefetch(const void* p, std::size_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  for (std::size_t i = 0; i < bytes; i += 64) __builtin_prefetch(static_cast<const char*>(p) + i);
#else
  (void)p;
  (void)bytes;
#endif
}

// set_tokens' tokens, checked against the list: its ops all take the same number of
// tokens; a position each, or three (M-RoPE's t, h, w: rope ops with config.mrope take
// them, every other op the first, t, gathered into the list's t_positions); or a position
// each and |mrope| apart, three a token or one (t = h = w: mrope_positions_of expands
// them); a sequence id each, or none (each op keeps its own).
NextTokens checked_tokens(CommandListImpl& impl, std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids,
                          std::span<const std::int32_t> mrope) {
  const char* op = "set_tokens";
  const std::size_t n_tokens = impl.most_tokens;
  if (n_tokens == 0) {
    throw InvalidArgument(op, "this", "a list with no op that takes token positions or sequence ids",
                          "a list recorded with rope, kv_append or attention on tokens");
  }
  if (impl.fewest_tokens != n_tokens) {
    throw InvalidArgument(
        op, "this",
        "a list whose ops take " + std::to_string(impl.fewest_tokens) + " and " + std::to_string(n_tokens) + " tokens",
        "ops that all take the same tokens");
  }
  const bool three = mrope.empty() && positions.size() == 3 * n_tokens;
  if (positions.size() != n_tokens && !three) {
    throw InvalidArgument(op, "positions.size()", std::to_string(positions.size()),
                          mrope.empty()
                              ? "the list's number of tokens, " + std::to_string(n_tokens) + ", or 3 x that (t, h, w per token)"
                              : "the list's number of tokens, " + std::to_string(n_tokens) + " (mrope_positions holds t, h, w)");
  }
  if (!mrope.empty() && mrope.size() != n_tokens && mrope.size() != 3 * n_tokens) {
    throw InvalidArgument(
        op, "mrope_positions.size()", std::to_string(mrope.size()),
        "0, the list's number of tokens, " + std::to_string(n_tokens) + " (t = h = w), or 3 x that (t, h, w per token)");
  }
  if (three && !impl.mrope_ops) {  // h and w would be dropped
    throw InvalidArgument(op, "positions.size()", std::to_string(positions.size()) + " (t, h, w per token)",
                          "one position per token: the list has no rope op with config.mrope");
  }
  if (!mrope.empty() && !impl.mrope_ops) {
    throw InvalidArgument(op, "mrope_positions", "given", "none: the list has no rope op with config.mrope");
  }
  if (!seq_ids.empty() && !impl.ids_ops) {  // they would be dropped
    throw InvalidArgument(op, "seq_ids", "given",
                          "none: no op of the list was recorded with sequence ids (each keeps its own: sequence 0 of "
                          "a one-sequence cache)");
  }
  std::vector<std::int32_t>& t_positions = impl.t_positions;  // its memory kept from one replay to the next
  if (three) {
    t_positions.resize(n_tokens);
    for (std::size_t t = 0; t < n_tokens; ++t) t_positions[t] = positions[3 * t];
  }
  if (!seq_ids.empty() && seq_ids.size() != n_tokens) {
    throw InvalidArgument(op, "seq_ids.size()", std::to_string(seq_ids.size()),
                          "0 (each op keeps its own) or the list's number of tokens, " + std::to_string(n_tokens));
  }
  // After every count (a C caller's count may not be its array's), values no op reads
  // too (ids without a cache): none dropped.
  detail::check_nonnegative(op, "positions", positions);
  detail::check_nonnegative(op, "mrope_positions", mrope);
  detail::check_nonnegative(op, "seq_ids", seq_ids);
  if (three) return {t_positions, seq_ids, positions};
  return {positions, seq_ids, mrope};
}

}  // namespace

void CommandList::set_tokens(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids) {
  set_tokens(positions, seq_ids, {});
}

void CommandList::set_tokens(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids,
                             std::span<const std::int32_t> mrope_positions) try {
  const char* op = "set_tokens";
  detail::OpScope scope(op);  // the ops' own scopes name them inside
  const InUse use(impl_.get(), op);
  auto& impl = *use;
  const detail::CachesInUse caches_use(impl.recorded_over, op);  // the recipes record over them again
  const NextTokens next = checked_tokens(impl, positions, seq_ids, mrope_positions);
  // As recording the ops over them would be: a reader's recipes have no planned entry for
  // check_planned to refuse.
  for (const auto& c : impl.recorded_over) c->check_written(op);
  // Appends or forks recorded (or last replayed) and not run: the replay would take their
  // place in the list, and their rows, which the host counts, would never be written.
  for (const auto& l : impl.logs) {
    // A fork that changed no word too: its copy of the rows is still to run, and lists
    // recorded after it wait for it (0.14.2: they waited for ever once it was replayed).
    if (!l.started) continue;
    throw InvalidArgument(op, "this",
                          "a list whose appends or forks, as recorded or last replayed, have not run (their rows would "
                          "never be written)",
                          "a list that ran since (submitted, or recorded into a command buffer); destroying it puts "
                          "them back unless a later change built on them (destroy the lists recorded after it first)");
  }
  // The caches' bookkeeping words the replay changes are logged in the list's log
  // (CommandListImpl::words), and those past the replay's mark put back when an op refuses
  // the new tokens. Every cache's log (each cache the list advances has one) is started
  // after the logs are saved: a refusal puts back a log not started as not started (a
  // started one would decide what destroying the list does), and after each log notes the
  // cache's last writer, which a refusal (or a rebuild) puts back from the saved logs.
  for (auto& l : impl.logs) l.replay_writer = l.cache->last_writer;
  impl.save_unrun();
  for (auto& l : impl.logs) impl.begin_unrun(l);
  const std::size_t mark = impl.words.size(), touch_mark = impl.touches.size();
  for (std::uint32_t i = 0; i < impl.logs.size(); ++i) {
    impl.logs[i].cache->journal = &impl.words;
    impl.logs[i].cache->touch_journal = &impl.touches;
    impl.logs[i].cache->journal_log = i;
  }
  struct Unjournal {
    CommandListImpl& impl;
    ~Unjournal() {
      for (const auto& c : impl.caches) c->journal = nullptr, c->touch_journal = nullptr;
    }
  } unjournal{impl};
  auto restore_caches = [&impl, mark, touch_mark] {
    impl.restore_unrun();
    auto& words = impl.words;
    for (std::size_t w = words.size(); w-- > mark;) *words[w].word = words[w].old;
    words.resize(mark);
    auto& touches = impl.touches;
    for (std::size_t t = touches.size(); t-- > touch_mark;) *touches[t].touch = touches[t].old;
    touches.resize(touch_mark);
    for (auto& l : impl.logs) {
      l.cache->last_writer = l.replay_writer;  // |wrote| is restore_unrun's
    }
  };
  // Patched in place first; where the new tokens change an op's dispatches (another
  // pattern of sequences), recorded again from the caches' state before the replay.
  // Between tokens the recipes' state is cold (an engine's own work and the kernels ran
  // since): asking for all of it at once lets the memory serve the misses together rather
  // than one op at a time.
  for (const detail::Recipe& r : impl.recipes) prefetch(r.run.get(), r.run_bytes);
  for (const auto& c : impl.caches) prefetch(c.get(), sizeof(detail::KvCacheImpl));
  prefetch(impl.logs.data(), impl.logs.size() * sizeof(CommandListImpl::CacheLog));
  // Ops recorded after the last record are in no command buffer of the caller's: a list
  // whose later ops advance a cache runs when it is submitted or recorded again.
  bool counts_as_run = impl.recorded_recipes != 0;
  for (std::size_t r = impl.recorded_recipes; counts_as_run && r < impl.recipes.size(); ++r) {
    counts_as_run = impl.recipes[r].cache == nullptr;
  }
  bool patch = true;
  impl.spare_planned.swap(impl.planned);  // planned again by the recipes
  try {
    impl.begin_replay(patch);  // (it may fail too: the logs above are started)
    for (;;) {
      impl.planned.clear();
      impl.pending.clear();  // left by an op that failed part way
      for (const detail::Recipe& r : impl.recipes) (*r.run)(impl, &next);
      if (counts_as_run) impl.check_planned(op);  // as record checks: it will run
      if (impl.end_replay()) break;
      restore_caches();
      patch = false;
      impl.begin_replay(patch);
    }
  } catch (...) {
    impl.abort_replay();
    restore_caches();
    impl.planned.swap(impl.spare_planned);
    throw;
  }
  // The caller's command buffers read the rewritten parameters and are submitted again as
  // they are (docs/interop.md): the caches' bookkeeping counts the replay as run, or
  // destroying the list would put back appends that ran, and later lists would wait on it.
  if (counts_as_run) impl.ran();
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("set_tokens");
}

void CommandList::submit_and_wait() try {
  const InUse use(impl_.get(), "submit_and_wait");
  auto& impl = *use;
  const detail::CachesInUse caches_use(impl.caches, "submit_and_wait");
  impl.check_planned("submit_and_wait");
  impl.recorded_recipes = 0;  // its replays are the list's own to submit from here
  impl.submitting([&] { impl.submit_and_wait(); });
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("submit_and_wait");
}

std::vector<OpTiming> CommandList::timings() const try {
  return InUse(impl_.get(), "timings")->timings();
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("timings");
}

std::size_t CommandList::n_tokens() const { return InUse(impl_.get(), "n_tokens")->most_tokens; }

CommandStats CommandList::stats() const try { return InUse(impl_.get(), "stats")->stats(); } catch (const std::bad_alloc&) {
  detail::host_out_of_memory("stats");
}

}  // namespace vkattn
