// Host cost: what recording and submitting cost the CPU, apart from what the device does.
// A decode step of a 32-layer Llama-style model (32 query heads, 8 KV heads, head_dim 128):
// per layer RoPE on Q and K, kv_append into a 256-slot f16 cache, and attention over the
// cache, with the fused kernel (AttentionPath::fused) or the three stages; and a prefill
// chunk of 512 tokens the same way (AttentionPath::automatic).
//
// Reported as CPU time of the benchmark thread (Google Benchmark's "CPU" column), per step,
// and as counters: s_per_dispatch (host time over the dispatches the list recorded, as
// CommandStats::ops counts them), device_us (the step's device time from timestamps, run
// once beside), dispatches. Cases:
// - record: recording the step's ops into a new list (the list is destroyed untimed);
// - record_submit: recording and one submit_and_wait (so encoding is counted; the wait
//   for the device is in the wall time, not in the CPU time only on devices that run
//   elsewhere: lavapipe runs on this CPU, so there device work shows too);
// - resubmit: submit_and_wait of a list recorded once (kv_append rewrites the same slots);
// - replay_loop: CommandList::set_tokens for the next token on a decode step recorded once
//   (the command buffer is kept: only parameter bytes change), over 256 and 4096 slots, as
//   an engine's decode loop runs it: the step's submit_and_wait between replays (untimed);
//   replay_cold streams 64 MiB between them too (untimed), as an engine's own work leaves
//   the CPU caches cold; replay_submit times the submit_and_wait with the replay.
// The caches' bookkeeping advances with every recorded append, so each recording uses
// fresh positions, and the caches are reset when they would wrap past what the case needs.
// - upload, download: Backend::upload / download of one small f32 tensor (4 KiB, 256 KiB)
//   behind staging copies (DeviceOptions::force_staging: lavapipe's memory is all
//   host-visible, so only forced does it take the path of a discrete GPU), each a
//   synchronous copy through a staging buffer and a one-shot submission. The wall time
//   includes lavapipe running the copy; the CPU time is the calling thread's.
#include <chrono>
#include <memory>
#include <numeric>
#include <vector>

#include "bench_common.hpp"

namespace vkattn::bench {
namespace {

constexpr std::size_t kLayers = 32, kHeads = 32, kKvHeads = 8, kDim = 128, kCapacity = 256;

struct Model {
  Backend& b;
  std::size_t tokens;
  std::vector<KvCache> caches;
  Tensor q, k, v, out;

  Model(Backend& backend, std::size_t n_tokens, std::size_t capacity) : b(backend), tokens(n_tokens) {
    for (std::size_t l = 0; l < kLayers; ++l) {
      caches.push_back(b.kv_cache({.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = capacity, .dtype = DType::f16}));
    }
    q = b.tensor({tokens, kHeads, kDim}, DType::f32);
    k = b.tensor({tokens, kKvHeads, kDim}, DType::f32);
    v = b.tensor({tokens, kKvHeads, kDim}, DType::f32);
    out = b.tensor({tokens, kHeads, kDim}, DType::f32);
    b.upload(q, normal_values(tokens * kHeads * kDim, 1));
    b.upload(k, normal_values(tokens * kKvHeads * kDim, 2));
    b.upload(v, normal_values(tokens * kKvHeads * kDim, 3));
  }

  // The step's ops for the next |tokens| positions; resets the caches first when the ring
  // would hold more than it can serve a chunk of this size.
  // The positions come from the cache: a list destroyed before it ran (BM_record without
  // submitting) puts its appends back.
  std::vector<std::int32_t> next_positions() {
    std::int32_t next = caches[0].next_position(0);
    if (next + static_cast<std::int32_t>(tokens) > static_cast<std::int32_t>(caches[0].config().capacity)) {
      for (KvCache& c : caches) c.reset(0);
      next = 0;
    }
    std::vector<std::int32_t> pos(tokens);
    std::iota(pos.begin(), pos.end(), next);
    return pos;
  }

  void record(CommandList& cmd, AttentionPath path) {
    const std::vector<std::int32_t> pos = next_positions();
    const RopeConfig rope{.base = 500000.0};
    for (std::size_t l = 0; l < kLayers; ++l) {
      cmd.rope(q, k, pos, rope);
      cmd.kv_append(caches[l], k, v, pos);
      cmd.attention(q, caches[l], out, {.q_positions = pos}, {.path = path});
    }
  }
};

double device_us(Backend& b, std::size_t tokens, std::size_t capacity, AttentionPath path) {
  Model m(b, tokens, capacity);
  CommandList cmd = b.commands({.timestamps = true});
  m.record(cmd, path);
  cmd.submit_and_wait();
  cmd.submit_and_wait();
  double ms = 0;
  for (const OpTiming& t : cmd.timings()) ms += t.ms;
  return ms * 1e3;
}

void report(benchmark::State& state, std::size_t dispatches, double device) {
  state.counters["dispatches"] = static_cast<double>(dispatches);
  // Iterations x dispatches per second of CPU time, inverted: seconds per dispatch.
  state.counters["s_per_dispatch"] = benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(dispatches),
                                                        benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["device_us"] = device;
}

// A case's model. Args: tokens, path (AttentionPath: 0 automatic, 1 fused, 2 three stages).
struct Case {
  explicit Case(const benchmark::State& state)
      : tokens(static_cast<std::size_t>(state.range(0))), path(static_cast<AttentionPath>(state.range(1))),
        capacity(tokens > 1 ? 2 * tokens : kCapacity), m(b, tokens, capacity) {}
  double device_time() { return device_us(b, tokens, capacity, path); }

  Backend& b = backend(BackendKind::vulkan);
  const std::size_t tokens;
  const AttentionPath path;
  const std::size_t capacity;
  Model m;
};

void BM_record(benchmark::State& state, bool submit) {
  Case c(state);
  std::size_t dispatches = 0;
  for (auto _ : state) {
    CommandList cmd = c.b.commands();
    c.m.record(cmd, c.path);
    if (submit) cmd.submit_and_wait();
    dispatches = cmd.stats().ops;
    state.PauseTiming();
    { CommandList gone = std::move(cmd); }
    state.ResumeTiming();
  }
  report(state, dispatches, c.device_time());
}

void BM_resubmit(benchmark::State& state) {
  Case c(state);
  CommandList cmd = c.b.commands();
  c.m.record(cmd, c.path);
  cmd.submit_and_wait();
  for (auto _ : state) cmd.submit_and_wait();
  report(state, cmd.stats().ops, c.device_time());
}

// A decode step recorded once and replayed for the next token (set_tokens), as an engine
// replays it: the step ran before each replay (a list whose appends have not run is not
// replayed, 0.14.1; so back-to-back replays, measured before, no longer exist), untimed
// unless |submit| times the submission too. |cold|: 64 MiB are streamed between
// iterations (untimed), as an engine's own work would between tokens.
void BM_replay(benchmark::State& state, bool submit, bool cold = false) {
  Backend& b = backend(BackendKind::vulkan);
  const AttentionPath path = static_cast<AttentionPath>(state.range(1));
  const auto capacity = static_cast<std::size_t>(state.range(2));
  Model m(b, 1, capacity);
  CommandList cmd = b.commands();
  m.record(cmd, path);
  cmd.submit_and_wait();
  std::vector<std::uint8_t> flush(cold ? 64u << 20 : 0);
  for (auto _ : state) {
    state.PauseTiming();
    if (!submit) cmd.submit_and_wait();
    const std::vector<std::int32_t> pos = m.next_positions();
    for (std::size_t i = 0; i < flush.size(); i += 64) flush[i] = static_cast<std::uint8_t>(flush[i] + 1);
    benchmark::DoNotOptimize(flush.data());
    state.ResumeTiming();
    cmd.set_tokens(pos);
    if (submit) cmd.submit_and_wait();
  }
  if (cmd.stats().encodings != 1) state.SkipWithError("a replay encoded the list again");
  report(state, cmd.stats().ops, device_us(b, 1, capacity, path));
}

// Both paths over 256-slot caches; and 4096 slots, where a replay must cost what it costs
// at 256 (nothing per slot: the slot tables stay on the device).
void decode_shapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "path", "capacity"});
  bm->Args({1, 1, kCapacity})->Args({1, 2, kCapacity})->Args({1, 1, 4096});
  bm->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

void shapes(benchmark::internal::Benchmark* bm) {
  // Decode with the fused kernel and with the three stages; prefill with the device's
  // choice (on lavapipe the fused kernel would take tens of seconds for 32 layers).
  bm->ArgNames({"tokens", "path"});
  bm->Args({1, 1})->Args({1, 2})->Args({512, 0});
  bm->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

void transfer_sizes(benchmark::internal::Benchmark* bm) {
  bm->ArgName("bytes")->Arg(4 << 10)->Arg(256 << 10)->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

// A backend of its own per call (Google Benchmark calls a case several times), so that
// its staging and submission state starts as an application's does.
void BM_transfer(benchmark::State& state, bool upload) {
  auto b = make_backend(BackendKind::vulkan, {.force_staging = true});
  const auto n = static_cast<std::size_t>(state.range(0)) / 4;
  Tensor t = b->tensor({n}, DType::f32);
  const std::vector<float>& x = normal_values(n, 7);
  b->upload(t, x);
  for (auto _ : state) {
    if (upload) {
      b->upload(t, x);
    } else {
      benchmark::DoNotOptimize(b->download(t));
    }
  }
  if (b->download(t) != x) state.SkipWithError("the tensor does not hold what was uploaded");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * state.range(0)));
}

BENCHMARK_CAPTURE(BM_record, record, false)->Apply(shapes);
BENCHMARK_CAPTURE(BM_record, record_submit, true)->Apply(shapes);
BENCHMARK(BM_resubmit)->Apply(shapes);
// Fixed counts: each iteration waits for a whole step on lavapipe, untimed.
BENCHMARK_CAPTURE(BM_replay, replay_loop, false)->Apply(decode_shapes)->Apply(iterations<400>);
BENCHMARK_CAPTURE(BM_replay, replay_cold, false, true)->Apply(decode_shapes)->Apply(iterations<100>);
BENCHMARK_CAPTURE(BM_replay, replay_submit, true)->Apply(decode_shapes);
BENCHMARK_CAPTURE(BM_transfer, upload, true)->Apply(transfer_sizes);
BENCHMARK_CAPTURE(BM_transfer, download, false)->Apply(transfer_sizes);

}  // namespace
}  // namespace vkattn::bench

VKATTN_BENCHMARK_MAIN()
