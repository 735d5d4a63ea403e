#include "common/heap_ledger.hpp"

#include <utility>

#include "common/op_scope.hpp"

namespace vkattn::detail {

HeapLedger::HeapLedger(std::vector<Heap> heaps) : heaps_(std::move(heaps)), used_(heaps_.size(), 0) {}

Error HeapLedger::full(std::uint32_t heap, const std::string& what, std::uint64_t bytes, std::uint64_t in_use,
                       std::uint64_t limit, const char* limit_name, const char* call) const {
  const std::uint64_t left = in_use < limit ? limit - in_use : 0;
  return Error(ErrorCode::out_of_memory,
               what + " needs " + std::to_string(bytes) + " bytes from " + heaps_[heap].name + ": " + std::to_string(in_use) +
                   " bytes in use of " + std::to_string(limit) + " (" + limit_name + "), " + std::to_string(left) + " left",
               call, 0, current_op());
}

void HeapLedger::reserve(std::uint32_t heap, std::uint64_t bytes, const std::string& what) {
  std::lock_guard lock(mutex_);
  const std::uint64_t size = heaps_[heap].size;
  if (bytes > size || used_[heap] > size - bytes) {
    throw full(heap, what, bytes, used_[heap], size, "its size", "heap size");
  }
  if (max_allocations_ && allocations_ >= max_allocations_) {
    throw Error(ErrorCode::out_of_memory,
                what + " needs a memory allocation of its own: this backend holds " + std::to_string(allocations_) +
                    ", the device's maxMemoryAllocationCount (each tensor, cache and list buffer is one)",
                "maxMemoryAllocationCount", 0, current_op());
  }
  used_[heap] += bytes;
  ++allocations_;
}

void HeapLedger::release(std::uint32_t heap, std::uint64_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  used_[heap] -= bytes;
  --allocations_;
}

std::uint64_t HeapLedger::used(std::uint32_t heap) const {
  std::lock_guard lock(mutex_);
  return used_[heap];
}

HeapReservation::HeapReservation(HeapLedger& ledger, std::uint32_t heap, std::uint64_t bytes, const std::string& what)
    : heap_(heap), bytes_(bytes) {
  ledger.reserve(heap, bytes, what);
  ledger_ = &ledger;
}

HeapReservation::~HeapReservation() {
  if (ledger_) ledger_->release(heap_, bytes_);
}

HeapReservation::HeapReservation(HeapReservation&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)), heap_(other.heap_), bytes_(other.bytes_) {}

HeapReservation& HeapReservation::operator=(HeapReservation&& other) noexcept {
  if (this != &other) {
    if (ledger_) ledger_->release(heap_, bytes_);
    ledger_ = std::exchange(other.ledger_, nullptr);
    heap_ = other.heap_;
    bytes_ = other.bytes_;
  }
  return *this;
}

// VK_ERROR_OUT_OF_HOST_MEMORY's value, as a driver reports the same failure (the C API's
// VKATTN_ERROR_OUT_OF_HOST_MEMORY).
void host_out_of_memory(const char* op) {
  throw Error(ErrorCode::out_of_memory, "a host allocation failed (std::bad_alloc)", "operator new", -1, op);
}

}  // namespace vkattn::detail
