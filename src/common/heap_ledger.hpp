// What a backend's allocations take from each memory heap, kept against each heap's size,
// so that over-subscription is a clear Error(out_of_memory) when it is asked for, not a
// success that pages, fails later or is killed by the OS (lavapipe accepts 4 GiB of
// buffers in its 2 GiB heap; an absurd host vector aborts). Shared by every thread using
// the backend, and by the tensors, which may outlive it.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "vkattn/error.hpp"

namespace vkattn::detail {

class HeapLedger {
 public:
  struct Heap {
    std::string name;    // "heap 0 (device-local)", "host memory"
    std::uint64_t size;  // bytes
  };
  explicit HeapLedger(std::vector<Heap> heaps);

  // Counts |bytes| more in |heap|, and one allocation more, or throws Error(out_of_memory)
  // naming |what|, the heap, the request and what is in use, when they would pass the
  // heap's size or the allocation limit.
  void reserve(std::uint32_t heap, std::uint64_t bytes, const std::string& what);
  void release(std::uint32_t heap, std::uint64_t bytes) noexcept;
  // At most |count| reservations held at once (Vulkan's maxMemoryAllocationCount); 0, the
  // default: no limit.
  void limit_allocations(std::uint32_t count) { max_allocations_ = count; }
  std::uint32_t allocation_limit() const { return max_allocations_; }
  std::uint64_t used(std::uint32_t heap) const;
  const Heap& heap(std::uint32_t heap) const { return heaps_[heap]; }

  // The Error for |what| needing |bytes| from |heap| when |in_use| of |limit| bytes are
  // taken; |limit_name| says what the limit is ("its size", "the driver's budget").
  Error full(std::uint32_t heap, const std::string& what, std::uint64_t bytes, std::uint64_t in_use, std::uint64_t limit,
             const char* limit_name, const char* call) const;

 private:
  std::vector<Heap> heaps_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> used_;
  std::uint32_t max_allocations_ = 0, allocations_ = 0;
};

// One reservation, released when it goes (members of tensors and buffers).
class HeapReservation {
 public:
  HeapReservation() = default;
  HeapReservation(HeapLedger& ledger, std::uint32_t heap, std::uint64_t bytes, const std::string& what);
  ~HeapReservation();
  HeapReservation(HeapReservation&& other) noexcept;
  HeapReservation& operator=(HeapReservation&& other) noexcept;

 private:
  HeapLedger* ledger_ = nullptr;
  std::uint32_t heap_ = 0;
  std::uint64_t bytes_ = 0;
};

// Throws Error(out_of_memory) for a host allocation that failed (std::bad_alloc) inside
// |op|: public entry points catch std::bad_alloc and call this, so it never escapes.
[[noreturn]] void host_out_of_memory(const char* op);

}  // namespace vkattn::detail
