// Shared by the benchmarks: one backend per kind for the whole run, per-op device time
// (Vulkan timestamps; host time on the CPU backend), and the same-device copy bandwidth
// that every figure is reported against. Absolute numbers on one device say little about
// another; the ratio to that device's own copy kernel travels better.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "vkattn/backend.hpp"
#include "vkattn/command_list.hpp"
#include "vkattn/error.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"

namespace vkattn::bench {

// $VKATTN_BENCH_PRECISION=f16_products: attention() timed under
// AttentionPrecision::f16_products (the matrix kernel where it runs: the probe's matrix
// rows); anything else, f32. Checked against the f32 CPU reference at the same tolerance.
inline AttentionPrecision bench_precision() {
  const char* env = std::getenv("VKATTN_BENCH_PRECISION");
  return env && std::string(env) == "f16_products" ? AttentionPrecision::f16_products : AttentionPrecision::f32;
}

// A probe whose kernel computes no valid result, so that nothing is checked against the
// CPU reference: VKATTN_DECODE=...load_only=1 or skip=<parts>, or
// VKATTN_PREFILL=...matrix_skip=<parts>.
inline bool probe_without_result() {
  // The value of |knob| in the comma-separated list $|var| ("" where it is not set); the
  // last where it is set twice, as the library reads it.
  const auto value = [](const char* var, const std::string& knob) {
    const char* env = std::getenv(var);
    const std::string all = env ? env : "";
    std::string found;
    for (std::size_t at = 0; at <= all.size();) {
      const std::size_t end = std::min(all.find(',', at), all.size());
      const std::string item = all.substr(at, end - at);
      if (item.compare(0, knob.size() + 1, knob + "=") == 0) found = item.substr(knob.size() + 1);
      at = end + 1;
    }
    return found;
  };
  const std::string skip = value("VKATTN_DECODE", "skip"), matrix_skip = value("VKATTN_PREFILL", "matrix_skip");
  return value("VKATTN_DECODE", "load_only") == "1" || (!skip.empty() && skip != "none") ||
         (!matrix_skip.empty() && matrix_skip != "none");
}

// The contents of |parts| one after another (tensors holding blocks of rows).
inline std::vector<float> concat(Backend& b, const std::vector<Tensor>& parts) {
  std::vector<float> all;
  for (const Tensor& t : parts) {
    const std::vector<float> part = b.download(t);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// |n| Normal(0, 1) values, made once per (n, seed) for the whole run: Google Benchmark
// calls a case several times while it settles the iteration count.
inline const std::vector<float>& normal_values(std::size_t n, unsigned seed) {
  static std::map<std::pair<std::size_t, unsigned>, std::vector<float>> cache;
  auto& x = cache[{n, seed}];
  if (x.size() != n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    x.resize(n);
    for (float& v : x) v = normal(rng);
  }
  return x;
}

// One backend per kind (and, for Vulkan, per kernel family) for the whole run.
inline std::map<std::pair<BackendKind, KernelShape>, std::unique_ptr<Backend>>& backends() {
  static std::map<std::pair<BackendKind, KernelShape>, std::unique_ptr<Backend>> all;
  return all;
}
inline Backend& backend(BackendKind kind, KernelShape shape = KernelShape::automatic) {
  auto& b = backends()[{kind, shape}];
  if (!b) {
    DeviceOptions options;
    if (shape != KernelShape::automatic) options.kernels = shape;
    b = make_backend(kind, options);
  }
  return *b;
}

// Device (or host) seconds of the list's ops in its last submission.
inline double op_seconds(CommandList& cmd) {
  double ms = 0;
  for (const OpTiming& t : cmd.timings()) ms += t.ms;
  return ms * 1e-3;
}

// |memo|'s value for |key|, made by |make| the first time (Google Benchmark calls a case
// several times; CPU references and checks are worth computing once).
template <class Map, class Key, class Make>
const typename Map::mapped_type& memo(Map& m, const Key& key, Make&& make) {
  auto it = m.find(key);
  if (it == m.end()) it = m.emplace(key, make()).first;
  return it->second;
}

// The bandwidth baseline: the same backend's copy kernel on 32 MiB (read + write), run
// between the timed iterations of the op it is compared with, whenever its own total time
// falls behind the op's (so at most once per iteration, and rarely beside tiny ops). The
// two then share the machine's state: on a busy or throttled machine (lavapipe's times
// swing up to 2x between minutes) a baseline measured once at start-up would make the
// ratios swing with it.
//
// $VKATTN_BENCH_BASELINE=blocks instead runs the copy three times when the Baseline is made
// (just before the timed loop) and never between iterations: on a GPU the interleaved
// copy leaves its 32 MiB of writes in L2 and evicts the op's inputs, which the op's next
// iteration then pays for; the probe times decode both ways to see how much.
class Baseline {
 public:
  // On the op's own backend (|shape| as the op's), so that one process holds one device.
  explicit Baseline(BackendKind kind, KernelShape shape = KernelShape::automatic) : copy_(copy_list(kind, shape)) {
    if (in_blocks()) {
      for (int i = 0; i < 3; ++i) run();
    }
  }
  // Runs the copy if it has had less device time than |op_total| seconds, or never ran.
  void keep_up(double op_total) {
    if (in_blocks() || (runs_ > 0 && seconds_ >= op_total)) return;
    run();
  }
  double bytes_per_second() const { return runs_ && seconds_ > 0 ? 8.0 * kFloats * runs_ / seconds_ : 0.0; }

 private:
  static constexpr std::size_t kFloats = std::size_t{8} << 20;
  static bool in_blocks() {
    static const bool blocks = [] {
      const char* env = std::getenv("VKATTN_BENCH_BASELINE");
      return env && std::string(env) == "blocks";
    }();
    return blocks;
  }
  void run() {
    copy_.submit_and_wait();
    seconds_ += op_seconds(copy_);
    ++runs_;
  }
  // One recorded copy per backend for the whole run (Google Benchmark calls a case several
  // times, and each call makes a Baseline): allocated, compiled and first touched once.
  struct Copy {
    Tensor src, dst;
    CommandList cmd;
  };

 public:
  static std::map<std::pair<BackendKind, KernelShape>, std::unique_ptr<Copy>>& lists() {
    static std::map<std::pair<BackendKind, KernelShape>, std::unique_ptr<Copy>> all;
    return all;
  }

 private:
  static CommandList& copy_list(BackendKind kind, KernelShape shape) {
    auto& c = lists()[{kind, shape}];
    if (!c) {
      Backend& b = backend(kind, shape);
      c.reset(new Copy{b.tensor({kFloats}, DType::f32), b.tensor({kFloats}, DType::f32), b.commands({.timestamps = true})});
      c->cmd.copy(c->src, c->dst);
      c->cmd.submit_and_wait();
    }
    return c->cmd;
  }
  CommandList& copy_;
  double seconds_ = 0;
  std::size_t runs_ = 0;
};

// $VKATTN_BENCH_ITERATIONS=n: every case runs n iterations (the probe sets it for its
// decode sections; tools/bench-smoke.sh sets 1). Google Benchmark's min_time counts manual
// (device) time, and 1.7 drops its wall-clock escape for manual time, so a case of a few
// microseconds otherwise runs tens of thousands of submits, each a round trip of 0.2-1 ms
// on a GPU machine: minutes a case. 0: unset.
inline long iterations_asked() {
  static const long n = [] {
    const char* env = std::getenv("VKATTN_BENCH_ITERATIONS");
    return env ? std::max(std::atol(env), 0L) : 0L;
  }();
  return n;
}
inline void cap_iterations(benchmark::internal::Benchmark* bm) {
  if (iterations_asked() > 0) bm->Iterations(iterations_asked());
}
// Iterations(N), unless $VKATTN_BENCH_ITERATIONS asks for another count.
template <long N>
void iterations(benchmark::internal::Benchmark* bm) {
  bm->Iterations(iterations_asked() > 0 ? iterations_asked() : N);
}

// Submits |cmd| (made with timestamps) once per iteration, and |baseline|'s copy, reports
// the op time, and returns the total. |per_op_seconds| receives each op name's total over
// the iterations (an op may record more than one dispatch, e.g. the split weighted sum's
// second pass). |warm_up|: submit once untimed first (pipeline compilation, first-touch of
// memory); a caller that has just submitted the list itself, or whose backend has nothing
// to warm up, may skip it.
inline double run_timed(benchmark::State& state, CommandList& cmd, Baseline& baseline,
                        std::map<std::string, double>& per_op_seconds, bool warm_up = true) {
  if (warm_up) cmd.submit_and_wait();
  double total = 0;
  for (auto _ : state) {
    cmd.submit_and_wait();
    double s = 0;
    for (const OpTiming& t : cmd.timings()) {
      s += t.ms * 1e-3;
      per_op_seconds[t.op] += t.ms * 1e-3;
    }
    state.SetIterationTime(s);
    total += s;
    baseline.keep_up(total);
  }
  return total;
}

inline double run_timed(benchmark::State& state, CommandList& cmd, Baseline& baseline) {
  std::map<std::string, double> per_op;
  return run_timed(state, cmd, baseline, per_op);
}

// Bytes per second of |bytes_per_iteration| over the run (total op time |seconds|)
// divided by the baseline copy's bytes per second; 0 when nothing was timed.
inline double copy_ratio(const benchmark::State& state, const Baseline& baseline, double bytes_per_iteration, double seconds) {
  const double copy = baseline.bytes_per_second();
  if (seconds <= 0 || copy <= 0) return 0;
  return bytes_per_iteration * static_cast<double>(state.iterations()) / seconds / copy;
}

// Sets bytes/s, copy_bytes_per_second (the baseline's), and copy_ratio = bytes/s over the
// baseline's bytes/s, from the bytes moved per iteration and the total op time.
inline void report_bandwidth(benchmark::State& state, const Baseline& baseline, double bytes_per_iteration, double seconds) {
  const double bytes = bytes_per_iteration * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["copy_GBps"] = baseline.bytes_per_second() * 1e-9;
  if (seconds > 0) state.counters["copy_ratio"] = copy_ratio(state, baseline, bytes_per_iteration, seconds);
}

// Sets gflops: floating-point operations per iteration (a multiply-add counts 2) over the
// total op time from run_timed(), in 10^9 per second.
inline void report_flops(benchmark::State& state, double flops_per_iteration, double seconds) {
  if (seconds <= 0) return;
  state.counters["gflops"] = flops_per_iteration * static_cast<double>(state.iterations()) / seconds * 1e-9;
}

// Two cases timed alternately, so that both see the same machine (a shared VM's speed
// swings from minute to minute): |run_a| and |run_b| return one run's seconds, the
// iteration's time is b's, and the counters are "<a>_us", "<b>_us" and |ratio| = b / a.
// |key| names the case for warm_up().
template <class RunA, class RunB>
void time_pair(benchmark::State& state, const std::string& key, const std::string& a, RunA run_a, const std::string& b,
               RunB run_b, const std::string& ratio) {
  warm_up(key, [&] {
    run_a();
    run_b();
  });
  double t_a = 0, t_b = 0;
  for (auto _ : state) {
    t_a += run_a();
    const double s = run_b();
    t_b += s;
    state.SetIterationTime(s);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters[a + "_us"] = t_a / n * 1e6;
  state.counters[b + "_us"] = t_b / n * 1e6;
  state.counters[ratio] = t_a > 0 ? t_b / t_a : 0;
}

// $VKATTN_BENCH_WARMUP seconds of wall-clock time (default 0): |run| repeated untimed before
// the case named |key| is first timed in this process. An idle GPU drops its clock while
// the CPU checks a case (an H200 to 345 MHz, and a 4kx4k prefill timed from there measured
// 3.8x slow). Google Benchmark's own warm-up counts manual (device) time, which for a short
// list is a sliver of each submit's round trip: 0.3 s of it took minutes on an H200.
template <class Run>
void warm_up(const std::string& key, Run run) {
  static const double seconds = [] {
    const char* env = std::getenv("VKATTN_BENCH_WARMUP");
    return env ? std::atof(env) : 0.0;
  }();
  static std::set<std::string> warmed;
  if (seconds <= 0 || !warmed.insert(key).second) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do run();
  while (std::chrono::steady_clock::now() < end);
}

// The largest difference from the CPU reference a case's output may show: 2e-3 in f32; under
// $VKATTN_BENCH_PRECISION=f16_products (checked against the same f32 reference) 1e-2, which
// holds the rounding of Q, K, V and P on N(0, 1) data at head_dim 128 and up (typically
// 2e-4; the tests hold the mode's derived bounds, docs/attention.md) and still catches a
// wrong kernel, whose errors are of the order of the outputs.
inline float check_tolerance() { return bench_precision() == AttentionPrecision::f16_products ? 1e-2f : 2e-3f; }

// Everything the benchmarks keep for the whole run, released before main returns: Vulkan
// objects destroyed by static destructors at exit may outlive the driver (NVIDIA's crashed
// there).
inline void release_all() {
  Baseline::lists().clear();
  backends().clear();
}

}  // namespace vkattn::bench

// BENCHMARK_MAIN(), releasing the benchmarks' backends before returning.
#define VKATTN_BENCHMARK_MAIN()                                         \
  int main(int argc, char** argv) {                                     \
    ::benchmark::Initialize(&argc, argv);                               \
    if (::benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    ::benchmark::RunSpecifiedBenchmarks();                              \
    ::benchmark::Shutdown();                                            \
    ::vkattn::bench::release_all();                                     \
    return 0;                                                           \
  }
