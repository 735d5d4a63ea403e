// The CPU backend's tensors, and what it runs for each op: the reference functions
// (reference_ops.hpp) on the tensors' values widened to float.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/heap_ledger.hpp"
#include "common/op_call.hpp"

namespace vkattn::detail {

class CpuTensor final : public TensorImpl {
 public:
  CpuTensor(const void* owner_, std::shared_ptr<HeapLedger> ledger_, const Shape& shape_, DType dtype_)
      : TensorImpl(owner_, shape_, dtype_), ledger(std::move(ledger_)),
        reservation(*ledger, 0, std::uint64_t{words} * 4, "tensor"), data(words, 0u) {}
  const std::shared_ptr<HeapLedger> ledger;  // outlives the reservation
  const HeapReservation reservation;         // counted before the vector is allocated
  std::vector<std::uint32_t> data;

  void store_runs(std::span<const WordRun> runs) override {
    for (const WordRun& r : runs) std::copy(r.words.begin(), r.words.end(), data.begin() + static_cast<std::ptrdiff_t>(r.first));
  }
};

inline CpuTensor& cpu(const std::shared_ptr<TensorImpl>& t) { return static_cast<CpuTensor&>(*t); }

// One recorded op: run at submit, in recording order.
struct CpuOp {
  const char* name;
  std::function<void()> run;
  std::optional<AttentionRun> attention{};  // an attention op: what CommandStats reports
};
// What |call| runs, with what it needs copied: the arguments as they are when recorded
// (a cache's keys are read from its slot table when the op runs, as on Vulkan).
CpuOp cpu_op(const OpCall& call);

}  // namespace vkattn::detail
