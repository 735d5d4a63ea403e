#include "cpu/cpu_backend.hpp"

#if defined(_WIN32)
#include <windows.h>
#else
#include <unistd.h>
#endif

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "common/command_list_impl.hpp"
#include "common/heap_ledger.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/op_scope.hpp"
#include "cpu/cpu_ops.hpp"

namespace vkattn::detail {
namespace {

class CpuCommandList final : public CommandListImpl {
 public:
  // The backend's ledger names it: kept alive here, so that no later backend's can take
  // its address while the list lives.
  CpuCommandList(std::shared_ptr<const HeapLedger> owner, bool timestamps) : owner_(std::move(owner)), timestamps_(timestamps) {}
  const void* owner() const override { return owner_.get(); }

  void record(const OpCall& call) override { ops_.push_back(cpu_op(call)); }

  void submit_and_wait() override {
    timings_.clear();
    reached_device = true;  // an op failing part way leaves those before it run
    try {
      for (const CpuOp& op : ops_) {
        const auto start = std::chrono::steady_clock::now();
        op.run();
        if (timestamps_) {
          const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
          timings_.push_back({op.name, ms.count()});
        }
      }
    } catch (...) {
      // Those from it on did not: the sequences the list writes hold rows of either, or
      // positions whose rows were never written, so none is read until it is reset.
      for (const Planned& p : planned) {
        if (p.writes && p.seq < p.cache->config.n_seqs) p.cache->set_unwritten(p.seq, true);
      }
      throw;
    }
    ++submits_;
  }

  std::vector<OpTiming> timings() const override { return timings_; }
  CommandStats stats() const override {
    CommandStats s{ops_.size(), 0, submits_};
    for (const CpuOp& op : ops_) {
      if (op.attention) s.attention.push_back(*op.attention);
    }
    return s;
  }

  // The CPU backend records nothing ahead of time worth keeping: a replay records afresh,
  // into the capacity of the replay before (swapped, not moved).
  void begin_replay(bool) override {
    saved_.swap(ops_);
    ops_.clear();
  }
  bool end_replay() override {
    saved_.clear();
    return true;
  }
  void abort_replay() noexcept override {
    ops_.swap(saved_);
    saved_.clear();
  }

 private:
  std::shared_ptr<const HeapLedger> owner_;
  bool timestamps_;
  std::vector<CpuOp> ops_;
  std::vector<CpuOp> saved_;  // the ops a replay replaces, until it ends
  std::vector<OpTiming> timings_;
  std::size_t submits_ = 0;
};

// Physical memory (1 TiB where the system does not say), or less when capped: the CPU
// backend's one heap.
std::uint64_t physical_memory_bytes() {
#if defined(_WIN32)
  MEMORYSTATUSEX status{};
  status.dwLength = sizeof status;
  if (GlobalMemoryStatusEx(&status) && status.ullTotalPhys > 0) return status.ullTotalPhys;
#else
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
#endif
  return std::uint64_t{1} << 40;
}

std::uint64_t host_memory_bytes(const DeviceOptions& options) {
  std::uint64_t bytes = physical_memory_bytes();
  if (options.cap_limits && options.cap_limits->device_local_bytes) {
    bytes = std::min(bytes, options.cap_limits->device_local_bytes);
  }
  return bytes;
}

// Stateless but for the ledger (guarded): any number of threads may use one at once.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const DeviceOptions& options)
      : ledger_(std::make_shared<HeapLedger>(std::vector<HeapLedger::Heap>{{"host memory", host_memory_bytes(options)}})) {
    limits_.device_local_bytes = ledger_->heap(0).size;
    limits_.timestamps = true;  // host times (CommandList::timings)
  }
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string device_name() const override { return "cpu reference"; }
  const DeviceLimits& limits() const override { return limits_; }
  CommandList commands(const CommandListOptions& options) override try {
    return CommandList(std::make_unique<CpuCommandList>(ledger_, options.timestamps));
  } catch (const std::bad_alloc&) {
    host_out_of_memory("commands");
  }

 protected:
  // The ledger, which every tensor and list of the backend keeps alive: a backend made
  // after this one is gone cannot be taken for it by an object that outlived it.
  const void* owner_tag() const override { return ledger_.get(); }
  std::shared_ptr<TensorImpl> make_tensor(const Shape& shape, DType dtype) override {
    OpScope scope("tensor");
    return std::make_shared<CpuTensor>(owner_tag(), ledger_, shape, dtype);
  }
  void write_words(TensorImpl& t, std::span<const std::uint32_t> words) override { t.store(words); }
  std::vector<std::uint32_t> read_words(const TensorImpl& t) override { return static_cast<const CpuTensor&>(t).data; }

 private:
  std::shared_ptr<HeapLedger> ledger_;
  DeviceLimits limits_ = spec_minimum_limits();
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const DeviceOptions& options) { return std::make_unique<CpuBackend>(options); }

}  // namespace vkattn::detail
