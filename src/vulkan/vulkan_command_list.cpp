#include "vulkan/vulkan_command_list.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <utility>
#include <variant>

#include "common/env.hpp"
#include "common/room.hpp"
#include "common/validate.hpp"
#include "vulkan/check.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/encoding.hpp"

namespace vkattn::detail {

namespace {

// One submission of an encoding (CommandList::submit); holds the encoding, so that what
// the work uses outlives it.
class VulkanSubmitted final : public SubmittedImpl {
 public:
  VulkanSubmitted(std::shared_ptr<Encoded> enc, std::uint64_t number) : enc_(std::move(enc)), number_(number) {}
  bool ready() override {
    OpScope scope("ready");
    return enc_->submission.finished(number_);
  }
  bool wait(std::uint64_t timeout_ns) override {
    OpScope scope("wait");
    return enc_->submission.wait(number_, timeout_ns);
  }

 private:
  std::shared_ptr<Encoded> enc_;
  std::uint64_t number_;
};

// Semaphore values on a device made without timeline semaphores: refused, not passed to
// vkQueueSubmit as invalid usage.
void check_binary(const SemaphoreSync& sync) {
  for (const auto& [values, what] : {std::pair{&sync.wait_values, "wait"}, {&sync.signal_values, "signal"}}) {
    for (std::size_t i = 0; i < values->size(); ++i) {
      if ((*values)[i] == 0) continue;
      throw InvalidArgument("submit", "semaphores." + std::string(what) + "[" + std::to_string(i) + "].value",
                            std::to_string((*values)[i]),
                            "0 (a binary semaphore): ExternalVulkan::device_create_info enabled no timelineSemaphore");
    }
  }
}

// Whether replays patch parameter words in place: $VKATTN_REPLAY unset, empty or "patch";
// "rebuild" rebuilds every op (tests compare the two).
bool replay_patches() {
  return env_choice("commands", "VKATTN_REPLAY", true, {{"patch", true}, {"rebuild", false}}, "patch (the default) or rebuild");
}

// Whether rope(q, k) followed by kv_append of that k records one dispatch: $VKATTN_FUSE
// unset, empty or "on"; "off" records each op's own (tests and benchmarks compare the two).
bool fusion_on() {
  return env_choice("commands", "VKATTN_FUSE", true, {{"on", true}, {"off", false}}, "on (the default) or off");
}

class VulkanCommandList final : public CommandListImpl {
 public:
  VulkanCommandList(std::shared_ptr<Context> ctx, const CommandListOptions& options)
      : ctx_(std::move(ctx)), options_(options), params_(ctx_->limits.storage_offset_alignment),
        spare_params_(ctx_->limits.storage_offset_alignment) {
    ctx_->device->check_alive();
    if (options_.timestamps && !ctx_->limits.timestamps) {
      throw Error(ErrorCode::unsupported, "this device's compute queue has no timestamps", "CommandListOptions::timestamps", 0,
                  "commands");
    }
  }

  const void* owner() const override { return ctx_.get(); }

  void record(const OpCall& call) override {
    if (replay_ && replay_->patching) {  // the same op with new tokens: its words rewritten
      Replay& r = *replay_;
      if (!r.failed && r.op >= marks_.size()) r.failed = true;
      if (!r.failed) {
        for (const TokenWords& w : marks_[r.op]) keep_for_undo(w);
        r.failed = !patch_tokens(params_.data(), marks_[r.op], call);
      }
      ++r.op;
      return;
    }
    reserve_room(marks_, 1);  // nothing can fail once the op is added
    const ScratchFn scratch = scratch_fn();
    const TempFn temp = temp_fn();
    // A rope op's dispatch is held back until the next op is known: a kv_append of its k
    // takes it in (fuse_rope_append), anything else comes after it.
    const bool after_rope = held_rope_ && std::holds_alternative<AppendCall>(call);
    if (!after_rope) flush_rope();
    const bool hold = fuse_ && std::holds_alternative<RopeCall>(call);
    with_params([&](ParamArena& arena) {
      OpEnv env{*ctx_, arena, scratch, temp};
      Dispatches ds = std::visit([&](const auto& c) { return build(env, c); }, call);
      check_param_bytes(arena.bytes().size());
      if (after_rope && !fuse_rope_append(*held_rope_, ds, arena.data())) {
        Dispatches both = one(*held_rope_);
        for (Dispatch& d : ds) both.push_back(std::move(d));
        return both;
      }
      if (hold && ds.size() == 1 && rope_fusable(ds[0], ctx_->limits)) {
        finish_dispatch(ds[0], ctx_->limits);
        ctx_->device->check_alive();
        held_rope_ = std::move(ds[0]);
        return Dispatches{};
      }
      return ds;
    });
    if (after_rope) held_rope_.reset();
    marks_.push_back(params_.take_marks());
  }

  // The list's parameters (every op's, in one buffer the encoding makes) fit one storage
  // buffer range: the op that would pass it is refused when recorded, leaving the list
  // usable, rather than every submission of the list failing.
  void check_param_bytes(std::uint64_t bytes) const {
    const std::uint64_t range = ctx_->limits.max_storage_buffer_range;
    if (bytes <= range) return;
    throw Error(ErrorCode::out_of_memory,
                "with this op the list's parameters (tokens, positions and sequences of the keys each op reads, among "
                "others) would need " +
                    std::to_string(bytes) + " bytes, over maxStorageBufferRange = " + std::to_string(range) +
                    ": record it into another list",
                "maxStorageBufferRange", 0, current_op());
  }

  // The held rope dispatch recorded on its own: before anything but a kv_append, and
  // before a list is submitted, encoded, replayed or counted.
  void flush_rope() {
    if (!held_rope_) return;
    add(one(*held_rope_));
    held_rope_.reset();
  }

  void submit_and_wait() override {
    OpScope scope("submit");
    flush_rope();
    if (ops_.empty()) {
      ++submits_;
      return;
    }
    timings_.clear();  // the earlier run's times are not this one's, should it fail or time out
    if (!encoded_) encode();
    const std::uint64_t before = encoded_->submission.submitted();
    const auto note_last = [&] {  // for wait(), as submitted (a timeout leaves it running)
      last_encoded_ = encoded_;
      last_submission_ = encoded_->submission.submitted();
    };
    try {
      encoded_->submission.submit_and_wait(ctx_->options.submit_timeout_ms);
      reached_device = true;
      note_last();
    } catch (const Error& e) {
      note_last();
      reached_device = encoded_->submission.submitted() != before;
      // Submitted, so maybe left running (a timeout, or a wait that failed otherwise):
      // host copies of what it uses wait for it (or, when noting that cannot allocate, the
      // call waits for it here: no semaphore of the caller's is involved).
      if (reached_device) {
        const std::uint64_t number = encoded_->submission.submitted();
        try {
          note_uses(number);
        } catch (const std::bad_alloc&) {
          encoded_->submission.wait_out(number);
        }
      }
      throw;
    }
    ++submits_;
    if (options_.timestamps) timings_ = read_timestamps(*encoded_, ops_);
  }

  std::shared_ptr<SubmittedImpl> submit(const SemaphoreSync* sync) override {
    OpScope scope("submit");
    flush_rope();
    if (sync && !ctx_->external) {
      throw InvalidArgument("submit", "semaphores", "given to a list of a backend that made its own device",
                            "none, or a list of a backend on the caller's device (make_backend(ExternalVulkan))");
    }
    if (sync && !ctx_->timeline_semaphores) check_binary(*sync);
    if (ops_.empty()) {
      if (sync) throw InvalidArgument("submit", "this", "an empty list, with semaphores", "a list with at least one op");
      ++submits_;
      return nullptr;
    }
    if (!encoded_) encode();
    // The uses are noted before the work is submitted, so that nothing can fail once it
    // runs (a host allocation failing after vkQueueSubmit would leave it unnoted, or the
    // call waiting for work that may wait on the caller's semaphore). The earlier
    // submission finishes first: the new uses replace its.
    Submission& submission = encoded_->submission;
    submission.finish(ctx_->options.submit_timeout_ms);
    const std::uint64_t number = submission.submitted() + 1;
    auto handle = std::make_shared<VulkanSubmitted>(encoded_, number);  // nothing to fail once it runs
    try {
      note_uses(number);
      submission.submit(ctx_->options.submit_timeout_ms, sync);  // number: none runs, and the list is this thread's
      reached_device = true;
    } catch (...) {
      forget_uses(number);
      throw;
    }
    ++submits_;
    timings_.clear();  // the last submission's times are this one's, which nothing reads
    last_encoded_ = encoded_;
    last_submission_ = number;
    return handle;
  }

  // The last submission's encoding may no longer be the list's (an op recorded since, a
  // replay that built the dispatches again) while a Submitted handle keeps it running; once
  // it is gone, its end waited for it.
  bool wait(std::uint64_t timeout_ns) override {
    OpScope scope("wait");
    const std::shared_ptr<Encoded> last = last_encoded_.lock();
    return !last || last->submission.wait(last_submission_, timeout_ns);
  }

  // Downloads of what submission |number| writes wait for it, uploads over anything it
  // reads or writes (vulkan_backend.cpp: settle), whether or not its handle is kept.
  void note_uses(std::uint64_t number) {
    for (const Dispatch& d : ops_) {
      for (const Binding& b : d.bindings) {
        if (b.tensor) static_cast<VulkanTensor&>(*b.tensor).note_use(encoded_, number, b.write);
      }
    }
  }
  // Takes back what note_uses(number) noted, for a submission that did not happen.
  void forget_uses(std::uint64_t number) noexcept {
    for (const Dispatch& d : ops_) {
      for (const Binding& b : d.bindings) {
        if (b.tensor) static_cast<VulkanTensor&>(*b.tensor).forget_use(encoded_, number);
      }
    }
  }

  std::vector<OpTiming> timings() const override { return timings_; }
  CommandStats stats() const override {
    const Encoded* latest = encoded_ ? encoded_.get() : external_.get();  // the two record the same barriers
    CommandStats s{ops_.size(), latest ? latest->barriers : 0, submits_, 0, encodings_};
    for (const Dispatch& d : ops_) {
      for (const Binding& b : d.bindings) s.texel_reads += b.texel ? 1 : 0;
      if (d.attention) s.attention.push_back(*d.attention);
    }
    if (held_rope_) {  // counted as the op it will be
      ++s.ops;
      for (const Binding& b : held_rope_->bindings) s.texel_reads += b.texel ? 1 : 0;
    }
    return s;
  }

  // A replay first patches the recorded parameters in place: each op rewrites its token
  // words (patch_tokens), keeping what they held until the replay ends, and builds
  // nothing; only those words reach the device. When an op's new tokens change more than
  // those words, end_replay() puts them back and says so, and the frontend replays again
  // rebuilding: each op's dispatches are built and compared with the recorded ones as it
  // goes (add); while they match, the rebuilt ones are dropped and the recorded ones stay.
  void begin_replay(bool patch) override {
    ctx_->device->check_alive();  // a patch alone would reach no call that checks
    flush_rope();
    replay_.emplace();  // in place: a replay on every token allocates nothing
    if (patch && patch_replay_) {
      replay_->patching = true;
      patched_.clear();
      undo_.clear();
      return;
    }
    replay_->marks = std::exchange(marks_, std::move(spare_marks_));
    marks_.clear();
    replay_->params = std::exchange(params_, std::move(spare_params_));
    params_.clear();
    replay_->encoded = std::exchange(encoded_, nullptr);
    replay_->external = std::exchange(external_, nullptr);
    // The same parameters again, most likely: room for them at once.
    params_.reserve(replay_->params.bytes().size());
  }

  // The encodings stay when every rebuilt dispatch binds, pushes and dispatches what the
  // encoded one does: then only parameter bytes (positions, slot tables) changed, and they
  // are rewritten in place. Anything else encodes afresh, except for a list recorded into
  // callers' command buffers, which would go on running the old dispatches: refused.
  bool end_replay() override {
    Replay& r = *replay_;
    if (!r.patching) flush_rope();
    if (r.patching) {
      if (r.failed || r.op != marks_.size()) {
        abort_replay();
        return false;
      }
      if (encoded_) encoded_->submission.finish(ctx_->options.submit_timeout_ms);
      r.params_written = true;
      if (encoded_) write_patched(*encoded_);
      each_external(external_, [&](Encoded& e) { write_patched(e); });
      replay_.reset();
      return true;
    }
    const bool same = !r.diverged && r.matched == ops_.size() && r.params.bytes().size() == params_.bytes().size();
    if (!same && (r.external || !retired_.empty())) {
      throw InvalidArgument("set_tokens", "positions / seq_ids",
                            "tokens that change the list's dispatches (tiles follow the sequences' pattern)",
                            "tokens with the pattern recorded, for a list recorded into a command buffer "
                            "(record it afresh into a new list instead)");
    }
    if (same) {
      // The list's own submissions may still read the parameters (asynchronous, or after a
      // timeout). Callers' command buffers are the caller's to have finished (vulkan.hpp).
      if (r.encoded) r.encoded->submission.finish(ctx_->options.submit_timeout_ms);
      r.params_written = true;
      if (r.encoded) write_params(*r.encoded);
      each_external(r.external, [&](Encoded& e) { write_params(e); });
      encoded_ = std::move(r.encoded);
      external_ = std::move(r.external);
    } else if (!r.diverged) {
      ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(r.matched), ops_.end());  // fewer ops than recorded
    }
    spare_params_ = std::move(r.params);
    spare_marks_ = std::move(r.marks);
    scratch_log_ = std::move(r.scratch_used);
    replay_.reset();
    return true;
  }

  void abort_replay() noexcept override {
    if (!replay_) return;     // begin_replay failed before it set anything aside (a held rope is the recording's)
    held_rope_.reset();       // held by this replay (begin_replay records any held before it)
    if (replay_->patching) {  // the patched words back, and to the device if written there
      std::size_t end = undo_.size();
      for (auto it = patched_.rbegin(); it != patched_.rend(); ++it) {
        end -= it->second;
        std::memcpy(params_.data() + it->first, undo_.data() + end, it->second);
      }
      if (replay_->params_written) {
        if (encoded_) try_write_params(*encoded_, true);
        each_external(external_, [&](Encoded& e) { try_write_params(e, true); });
      }
      replay_.reset();
      return;
    }
    params_ = std::move(replay_->params);
    if (replay_->diverged) ops_ = std::move(replay_->ops);
    marks_ = std::move(replay_->marks);
    encoded_ = std::move(replay_->encoded);
    external_ = std::move(replay_->external);
    if (replay_->params_written) {  // they hold the new parameters: back to the old ones
      if (encoded_) try_write_params(*encoded_);
      each_external(external_, [&](Encoded& e) { try_write_params(e); });
    }
    replay_.reset();
  }

 private:
  // What a replay set aside, and the scratch it has handed out so far.
  struct Replay {
    // Declared, so that replay_.emplace() (in a member defined above) sees it: an implicit
    // one waits for the enclosing class to be complete, which clang holds to.
    Replay() {}
    ParamArena params{0};  // the recorded parameters
    std::shared_ptr<Encoded> encoded, external;
    std::vector<std::shared_ptr<TensorImpl>> scratch_used;
    std::size_t matched = 0;    // recorded dispatches the rebuilt ones have matched so far
    bool diverged = false;      // a rebuilt dispatch differed: ops_ holds the rebuilt ones
    std::vector<Dispatch> ops;  // once diverged: the recorded dispatches
    bool params_written = false;
    // Patching: the ops replayed so far, and whether one could not be patched.
    bool patching = false, failed = false;
    std::size_t op = 0;
    std::vector<TokenMarks> marks;  // rebuilding: the recorded ops' token words
  };

  // A write that cannot throw (abort_replay); a failed one drops the own encoding.
  void try_write_params(Encoded& enc, bool patched = false) noexcept {
    try {
      if (patched)
        write_patched(enc);
      else
        write_params(enc);
    } catch (...) {
      if (&enc == encoded_.get()) encoded_.reset();
    }
  }

  // Host writes before vkQueueSubmit are visible to the submission without a barrier. A
  // retired encoding holds the parameters of the ops recorded before it: a prefix.
  void write_params(Encoded& enc) {
    const std::span<const std::uint8_t> bytes = params_.bytes();
    enc.param_target().write(bytes.first(std::min<std::size_t>(bytes.size(), enc.param_bytes)));
  }
  void write_patched(Encoded& enc) {
    if (enc.param_bytes >= params_.bytes().size()) {
      enc.param_target().write_ranges(params_.data(), patched_);
      return;
    }
    std::vector<std::pair<VkDeviceSize, VkDeviceSize>> inside;
    for (const auto& [offset, size] : patched_) {
      if (offset < enc.param_bytes) inside.emplace_back(offset, std::min(size, enc.param_bytes - offset));
    }
    enc.param_target().write_ranges(params_.data(), inside);
  }
  // |f| on each encoding recorded into callers' command buffers: |current| and those
  // retired when ops were added after it (vulkan.hpp: they stay valid through replays).
  template <class F>
  void each_external(const std::shared_ptr<Encoded>& current, F f) {
    if (current) f(*current);
    for (const auto& e : retired_) f(*e);
  }

  // What a patch overwrites, kept until the replay ends (abort_replay puts it back).
  // Both or neither: abort_replay reads undo_ back by patched_'s sizes.
  void keep_for_undo(const TokenWords& w) {
    const std::uint64_t bytes = token_bytes(w);
    if (bytes == 0) return;
    const std::size_t kept = undo_.size();
    undo_.insert(undo_.end(), params_.data() + w.offset, params_.data() + w.offset + bytes);
    try {
      patched_.emplace_back(w.offset, bytes);
    } catch (...) {
      undo_.resize(kept);
      throw;
    }
  }

  // Builds an op's dispatch (or dispatches) with parameters; the list grows only once
  // every dispatch is built and its grid checked, and the arena is cut back on a throw, so
  // a throw leaves nothing behind (without copying the arena per op).
  template <class Build>
  void with_params(Build build) {
    const std::size_t size = params_.bytes().size();
    try {
      add(build(params_));
    } catch (...) {
      params_.truncate(size);  // a throw leaves the list as it was
      params_.take_marks();
      throw;
    }
  }

  // The list's scratch tensor, grown (replaced; earlier ops keep the old one) when an op
  // needs more.
  // A replay hands each op the scratch it had before (when it still fits), so that the
  // rebuilt dispatches bind what the encoded ones do.
  ScratchFn scratch_fn() {
    return [this](std::uint64_t floats) {
      if (replay_ && replay_->scratch_used.size() < scratch_log_.size()) {
        const auto& before = scratch_log_[replay_->scratch_used.size()];
        if (before->numel >= floats) {
          replay_->scratch_used.push_back(before);
          return before;
        }
      }
      if (!scratch_ || scratch_->numel < floats) {
        try {
          scratch_ = std::make_shared<VulkanTensor>(ctx_, Shape{static_cast<std::size_t>(floats)}, DType::f32, false);
        } catch (const Error& e) {  // named as the op's intermediate results, not a tensor of the caller's
          rethrow_allocation(e, "the scratch of its intermediate results (partial sums, key lists)", e.op());
        }
      }
      (replay_ ? replay_->scratch_used : scratch_log_).push_back(scratch_);
      return scratch_;
    };
  }

  // The list's f32 tensor of each shape for ops' intermediate results: attention() on every
  // layer of a model allocates it once, not per layer.
  TempFn temp_fn() {
    return [this](const TempShape& shape) {
      auto& t = temps_[shape];
      if (!t) t = std::make_shared<VulkanTensor>(ctx_, Shape(shape.begin(), shape.end()), DType::f32, false);
      return t;
    };
  }

  void add(Dispatches ds) {
    if (ds.empty()) return;       // a rope op held back (record)
    ctx_->device->check_alive();  // fail at once, not at submit
    for (Dispatch& d : ds) finish_dispatch(d, ctx_->limits);
    // Room first: a push that failed halfway would leave part of an op in the list.
    reserve_room(ops_, ds.size());
    if (external_) reserve_room(retired_, 1);
    if (replay_ && !replay_->diverged) {
      Replay& r = *replay_;
      bool same = r.matched + ds.size() <= ops_.size();
      for (std::size_t i = 0; same && i < ds.size(); ++i) same = same_dispatch(ops_[r.matched + i], ds[i]);
      if (same) {
        r.matched += ds.size();
        return;
      }
      // From here the list is rebuilt: the recorded dispatches are kept for abort_replay.
      r.ops = ops_;
      ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(r.matched), ops_.end());
      r.diverged = true;
    }
    for (Dispatch& d : ds) ops_.push_back(std::move(d));
    encoded_.reset();
    if (external_) retired_.push_back(std::move(external_));
  }

  void encode() {
    OpScope scope("encode");
    auto enc = prepare_encoding(ctx_, ops_, params_.bytes(), options_.timestamps);
    enc->cb = enc->submission.begin();
    // Results become visible to host reads (mapped tensors) and to transfers (staging).
    record_commands(*enc, ops_, enc->cb, true, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                    VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT);
    enc->submission.end();
    encoded_ = std::move(enc);
    ++encodings_;
  }

  void record_into(void* command_buffer, const RecordOptions& options) override {
    OpScope scope("record");
    flush_rope();
    if (!ctx_->external) {
      throw InvalidArgument("record", "this", "a list of a backend that made its own device",
                            "a list of a backend on the caller's device (make_backend(ExternalVulkan))");
    }
    ctx_->device->check_alive();
    // Vulkan cannot say which device made a command buffer, but the loader gives each one
    // its device's dispatch table (their first word), so one of another device shows. (An
    // engine calling a driver without the loader passes this check either way.)
    if (*static_cast<void* const*>(command_buffer) != *reinterpret_cast<void* const*>(ctx_->device->handle())) {
      throw InvalidArgument("record", "command_buffer", "a command buffer of another device",
                            "a VkCommandBuffer of the backend's device, in the recording state");
    }
    if (options_.timestamps) {
      throw InvalidArgument("record", "CommandListOptions::timestamps", "true",
                            "false (timestamps are read back after vkattn's own submissions only)");
    }
    if (ops_.empty()) return;
    // One encoding serves every command buffer the list is recorded into: its descriptor
    // sets are never updated once written, and it lives until the list does.
    if (!external_) external_ = prepare_encoding(ctx_, ops_, params_.bytes(), options_.timestamps);
    VkPipelineStageFlags stage = 0;
    if (options.exit_barrier)
      stage = options.dst_stage_mask ? options.dst_stage_mask : VkPipelineStageFlags{VK_PIPELINE_STAGE_ALL_COMMANDS_BIT};
    const VkAccessFlags access =
        options.dst_access_mask ? options.dst_access_mask : VkAccessFlags{VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
    record_commands(*external_, ops_, static_cast<VkCommandBuffer>(command_buffer), options.entry_barrier, stage, access);
    ++encodings_;
  }

  std::shared_ptr<Context> ctx_;
  CommandListOptions options_;
  ParamArena params_;
  ParamArena spare_params_;  // the arena a replay fills next (its memory kept)
  std::vector<Dispatch> ops_;
  std::vector<TokenMarks> marks_;        // each recorded op's token words in params_
  std::vector<TokenMarks> spare_marks_;  // the vector a rebuilding replay fills next
  // A patching replay's (offset, size) ranges of params_ and what they held, in order.
  std::vector<std::pair<VkDeviceSize, VkDeviceSize>> patched_;
  std::vector<std::uint8_t> undo_;
  // $VKATTN_REPLAY=rebuild: replays rebuild every op (the path patching falls back to).
  bool patch_replay_ = replay_patches();
  bool fuse_ = fusion_on();                                 // $VKATTN_FUSE
  std::optional<Dispatch> held_rope_;                       // see record()
  std::shared_ptr<TensorImpl> scratch_;                     // see scratch_fn()
  std::map<TempShape, std::shared_ptr<TensorImpl>> temps_;  // see temp_fn()
  std::vector<std::shared_ptr<TensorImpl>> scratch_log_;    // the scratch each op was given
  std::optional<Replay> replay_;                            // while the frontend replays
  std::shared_ptr<Encoded> encoded_;                        // shared with the Submitted handles of its submissions
  std::weak_ptr<Encoded> last_encoded_;                     // the last submission's (wait)
  std::uint64_t last_submission_ = 0;                       // its number there
  // The encoding recorded into callers' command buffers, and those it replaced when ops
  // were added: all live as long as the list, as the contract says (vulkan.hpp).
  std::shared_ptr<Encoded> external_;
  std::vector<std::shared_ptr<Encoded>> retired_;
  std::vector<OpTiming> timings_;
  std::size_t submits_ = 0;
  std::size_t encodings_ = 0;
};

}  // namespace

std::unique_ptr<CommandListImpl> make_vulkan_command_list(std::shared_ptr<Context> ctx, const CommandListOptions& options) {
  return std::make_unique<VulkanCommandList>(std::move(ctx), options);
}

}  // namespace vkattn::detail
