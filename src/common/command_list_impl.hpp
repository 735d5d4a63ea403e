// The backend interface of a command list: one entry point for every op (record(const
// OpCall&)), submission, and replay. The public CommandList checks arguments
// (common/command_list.cpp) and forwards here.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/op_call.hpp"
#include "common/use_flag.hpp"
#include "vkattn/command_list.hpp"
#include "vkattn/error.hpp"

namespace vkattn::detail {

struct SemaphoreSync;  // vulkan/device.hpp

// A submission in flight (the public Submitted).
class SubmittedImpl {
 public:
  virtual ~SubmittedImpl();
  virtual bool ready() = 0;
  virtual bool wait(std::uint64_t timeout_ns) = 0;
};

class CommandListImpl;

// A replayed list's tokens (CommandList::set_tokens).
struct NextTokens {
  std::span<const std::int32_t> positions, seq_ids;  // seq_ids empty: each op keeps its own
  std::span<const std::int32_t> mrope_positions;     // (t, h, w) per token, or empty
};

// How the frontend records one op again: the same checks and the same arguments, except
// the tokens' positions and sequence ids when |next| is given.
struct Recipe {
  struct Run {
    virtual ~Run() = default;
    virtual void operator()(CommandListImpl& impl, const NextTokens* next) = 0;
  };
  std::unique_ptr<Run> run;
  std::size_t run_bytes = 0;           // the size of *run (set_tokens prefetches it)
  std::size_t n_tokens = 0;            // tokens whose data set_tokens replaces; 0: none
  std::shared_ptr<KvCacheImpl> cache;  // the cache whose bookkeeping it advances, or null
};

// Arguments reach a CommandListImpl already checked and normalized
// (RopeConfig::rotary_dim filled in).
class CommandListImpl {
 public:
  CommandListImpl();
  // Puts back what the list's ops changed in the caches' bookkeeping since it last ran
  // (undo_unrun).
  virtual ~CommandListImpl();
  CommandListImpl(const CommandListImpl&) = delete;
  CommandListImpl& operator=(const CommandListImpl&) = delete;
  std::vector<Recipe> recipes;  // every op recorded, in order (kept by the frontend)
  // The fewest and most tokens the recipes take (those that take any).
  std::size_t fewest_tokens = SIZE_MAX, most_tokens = 0;
  std::vector<std::shared_ptr<KvCacheImpl>> caches;  // those the recipes advance, once each
  // Every cache an op of the list was recorded over (advancing or reading it), once each:
  // a replay records them again, so it uses them all (CachesInUse).
  std::vector<std::shared_ptr<KvCacheImpl>> recorded_over;
  // What the list's appends and forks changed in the caches' bookkeeping since the list
  // last ran (submitted, or recorded into a caller's command buffer): the words with what
  // they held, and the sequences they planned. The host's bookkeeping advances when an op
  // is recorded and the device's when it runs: a list destroyed before it ran puts a
  // cache's words back where no later change builds on them (no other list's op or change
  // outside lists since its first word: it is the cache's last_writer, and was whenever it
  // wrote), and otherwise marks the sequences it wrote unwritten
  // (unless reset since), so that host and device never silently disagree. A refused
  // replay puts back its own words.
  // One log for the whole list, so that a replay touches a few contiguous arrays rather
  // than a heap array per cache (docs/host-cost.md: the cost of putting back): per cache
  // a CacheLog of scalars, and every cache's words and sequences in order in |words| and
  // |marks|, each naming its CacheLog.
  struct CacheLog {
    KvCacheImpl* cache;
    bool started = false;              // since the list last ran
    bool wrote = false;                // an op of the list changed the cache since it started
    bool undo = false;                 // undo_unrun: its words are put back
    std::uint64_t since = 0;           // the cache's last change outside lists at the start (kStale: not to be put back)
    std::uint64_t writer = 0;          // the cache's last_writer at the start
    std::uint64_t first_clock = 0;     // the cache's clock at the start
    std::uint64_t undone_at = 0;       // undo_unrun: the tick of the put-back
    std::uint64_t replay_writer = 0;   // set_tokens: the cache's last_writer before the replay
    std::size_t last_mark = SIZE_MAX;  // its latest entry in |marks|
    std::size_t touch_from = 0;        // its first entry in |touches| since it started
  };
  static constexpr std::uint64_t kStale = UINT64_MAX;
  // set_tokens: the logs and marks as a replay begins, which a refused replay puts back
  // (undo_unrun reads them: else a refused replay would decide what destroying the list
  // does). Kept in the list so that a replay, on an engine's every token, copies into the
  // capacity of the last rather than allocating.
  void save_unrun();
  void restore_unrun() noexcept;
  const std::uint64_t id;  // unique per list (KvCacheImpl::last_writer)
  std::vector<CacheLog> logs;
  std::vector<LoggedWord> words;     // KvCacheImpl::journal points here while the ops run
  std::vector<LoggedTouch> touches;  // and KvCacheImpl::touch_journal here
  // A sequence an op planned, and the cache's clock after the op (a run of ops on one
  // sequence of one cache keeps one entry, its latest). Only the sequences the list wrote
  // are marked when it is dropped: a fork built on them cannot run before the list, so it
  // is in a list that never runs either, and marks its destination when dropped in turn
  // (0.14.5: forks were followed, with bookkeeping of its own that marked wrongly three
  // times: a fork put back, a fork that changed no word, a fork before the write).
  struct SeqMark {
    std::uint32_t log;
    std::uint32_t seq;
    std::uint64_t latest;
  };
  std::vector<SeqMark> marks;
  void merge_marks();  // one entry per sequence of each cache
  // Words past this many (a list replayed again and again without running) are dropped:
  // every cache's sequences are then marked rather than put back. Marks past the bound are
  // merged per sequence.
  static constexpr std::size_t kMostUnrunWords = std::size_t{1} << 20;
  std::size_t merge_marks_at = std::size_t{1} << 16;
  // Set by a backend once a submission is on its way (vkQueueSubmit returned; the CPU
  // backend about to run the ops): a failure after it still counts as having run.
  bool reached_device = false;
  // |cache|'s log (its index in |logs|, added when it has none), not started.
  std::uint32_t log_of(KvCacheImpl& cache);
  void begin_unrun(CacheLog& log) noexcept;  // |log| started, or marked stale; words past kMostUnrunWords dropped
  // The list ran: what it changed is on the device too (KvCacheImpl::ran_at).
  void ran() noexcept;
  void forget_unrun() noexcept;  // the logs emptied
  // Runs |submit| (a submission or recording of the whole list) and then ran(); also when
  // it fails after the work reached the device (a wait that timed out, a lost device,
  // timestamps that could not be read).
  template <class F>
  auto submitting(F submit) -> decltype(submit()) {
    reached_device = false;
    try {
      if constexpr (std::is_void_v<decltype(submit())>) {
        submit();
        ran();
      } else {
        auto result = submit();
        ran();
        return result;
      }
    } catch (...) {
      if (reached_device) ran();
      throw;
    }
  }
  void undo_unrun() noexcept;
  std::vector<std::int32_t> t_positions;  // set_tokens: the t of each token given (t, h, w)
  bool mrope_ops = false;                 // a rope op of config.mrope was recorded
  bool ids_ops = false;                   // an op took sequence ids
  // The recipes in the caller's command buffers (CommandList::record) while their
  // recording was the list's last run: the caller submits them again after each
  // set_tokens, so a replay counts as the list running, as a record does; 0 after the
  // list's own submission, which the replays then wait for.
  std::size_t recorded_recipes = 0;
  // The sequences the list's appends and forks change (and a paged cache's free list,
  // index n_seqs, where they return blocks to it), each with its cache's last change outside
  // lists when the op was planned (KvCacheImpl::changes; the cache is kept alive by a recipe), the
  // ticks of the list's changes (a run of ops on one sequence keeps one entry), and the
  // latest change of another list it was planned after (|need|); and the sequences its
  // attention ops read, and the free list its ops take blocks from, where that change had
  // not run when planned (|first| = |last| = 0). A replay plans them again (the spare:
  // what the recording held, put back when it is refused).
  struct Planned {
    KvCacheImpl* cache;
    std::size_t seq;
    std::uint64_t at;
    std::uint64_t need = 0, first = 0, last = 0;
    bool ran = false;     // the list ran since this entry was planned
    bool writes = false;  // an op writes the sequence's rows (note_planned's |access|)
    // The first op that read them to write others (a fork's source, a copied block's
    // holder), and the list's first op after it that wrote them; its first paged fork into
    // the sequence after this entry wrote it (0: none). Once that later op ran, the list
    // does not run again (check_planned): the earlier op would read the later one's rows,
    // or write blocks the sequence no longer holds.
    std::uint64_t read_first = 0, write_after = 0, replaced_after = 0;
    // note_ring: the sequence's ring start (KvCacheImpl::oldest) and the cache's clock
    // when an attention op rotating its keys on read was planned; -1: not such an entry.
    std::int32_t oldest = -1;
    std::uint64_t read_at = 0;
  };
  std::vector<Planned> planned, spare_planned;
  struct UnrunState {
    std::vector<CacheLog> logs;
    std::vector<SeqMark> marks;
  } saved_unrun;
  // How an op uses a sequence: it reads its rows to write others' (a fork's source, a
  // copied block's holder), writes them (marked unwritten should the list never run), or
  // replaces its blocks (a fork into it, in a paged cache: the rows written before are in
  // blocks it no longer holds).
  enum class Access { read, write, replace };
  void note_planned(KvCacheImpl& cache, std::size_t seq, Access access = Access::write);
  void note_read(KvCacheImpl& cache, std::size_t seq);
  // An attention op over a cache with sinks that rotates its keys on read (KvRope::on_read)
  // rotates by positions in the ring as it starts when the op is planned (the sinks keep
  // theirs): check_planned refuses the list once the ring has moved under it.
  void note_ring(KvCacheImpl& cache, std::size_t seq);
  // The changes an op noted, made as it is applied (Logged::apply): the sequences
  // note_planned named, and the free list where the op took (|took|) or returned (|freed|)
  // blocks. Room is made first (make_room), so that it cannot fail.
  struct PendingSeq {
    std::size_t seq;
    bool reads;     // SeqTouch::read
    bool writes;    // marked (|marks|) as the op is applied
    bool replaces;  // note_rewrite
  };
  std::vector<PendingSeq> pending;
  void make_room();
  // The list's entries on |seq| that the op being applied (the cache's clock its tick)
  // changes under an earlier op of the list: it writes the sequence after that op read it,
  // or (|replaces|) replaces its blocks after that op wrote them (write_after,
  // replaced_after).
  void note_rewrite(const KvCacheImpl& cache, std::size_t seq, bool replaces) noexcept;
  // Whether a sequence in |pending| has a change of |cache| that has not run.
  bool touches_unrun(const KvCacheImpl& cache) const noexcept;
  void touch_pending(KvCacheImpl& cache, std::uint32_t log, bool took, bool freed) noexcept;
  // Throws InvalidArgument, naming |op|, when the list may not run now: a sequence it
  // writes was reset, truncated or restored after the list planned its ops (they would
  // write rows, a paged cache's blocks, and slot-table words the cache no longer has for
  // them); its ops were planned after another list's changes that have not run (lists that
  // change a cache, or read what another changed, run in the order they were recorded); or
  // it ran, and another list changed a sequence it writes since (it would write over them),
  // or a later op of its own that ran changed a sequence an earlier one reads, or replaced
  // the blocks of one an earlier one wrote (Planned::write_after, replaced_after); or the ring of a sequence its attention
  // rotates on read has moved since it was planned, by a change that has run.
  void check_planned(const char* op) const;

  // Replay: begin_replay() sets the recorded ops aside; the recipes then record them
  // again; end_replay() keeps the new ones (on Vulkan reusing the encoded command buffer
  // when only parameter bytes changed), abort_replay() restores the old ones. With
  // |patch|, a backend may rewrite the recorded ops' token data in place instead; when it
  // cannot, end_replay() restores the old ops and returns false, and the frontend replays
  // again without |patch|.
  virtual void begin_replay(bool patch) = 0;
  virtual bool end_replay() = 0;
  virtual void abort_replay() noexcept = 0;
  virtual const void* owner() const = 0;
  // Records one op (its arguments checked and normalized: OpCall).
  virtual void record(const OpCall& call) = 0;
  virtual void submit_and_wait() = 0;
  // CommandList::submit: null when the work is already done. |sync|: the caller's
  // semaphores, or null. By default (the CPU backend) runs the list at once and refuses
  // semaphores.
  virtual std::shared_ptr<SubmittedImpl> submit(const SemaphoreSync* sync);
  // CommandList::wait: true at once where lists run when submitted (the CPU backend).
  virtual bool wait(std::uint64_t) { return true; }
  // CommandList::record; |command_buffer| is a VkCommandBuffer. Backends that cannot
  // record into a caller's command buffer refuse (external.cpp).
  virtual void record_into(void* command_buffer, const RecordOptions& options);
  virtual std::vector<OpTiming> timings() const = 0;
  virtual CommandStats stats() const = 0;
  UseFlag in_use;  // InUse
};

// Holds a list's UseFlag for one public call.
class InUse {
 public:
  InUse(CommandListImpl* impl, const char* op) : impl_(impl) {
    if (!impl_) throw InvalidArgument(op, "this", "a moved-from CommandList", "a list made by Backend::commands");
    impl_->in_use.take(op, "this", "a list in use by another thread now", "a list used by one thread at a time");
  }
  ~InUse() { impl_->in_use.give_back(); }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;
  CommandListImpl& operator*() const { return *impl_; }
  CommandListImpl* operator->() const { return impl_; }

 private:
  CommandListImpl* impl_;
};

}  // namespace vkattn::detail
