// For test programs linked with support/failing_new.cpp, which replaces operator new: a
// test can make host allocations fail the way they do when memory runs out, without
// running out of memory.
#pragma once

#include <cstddef>

namespace vkattn::test {

// While alive, every operator new of at least |bytes| made on this thread throws
// std::bad_alloc (other threads, the driver's malloc and small allocations are untouched).
class FailLargeAllocations {
 public:
  explicit FailLargeAllocations(std::size_t bytes);
  ~FailLargeAllocations();
  FailLargeAllocations(const FailLargeAllocations&) = delete;
  FailLargeAllocations& operator=(const FailLargeAllocations&) = delete;
  std::size_t refused() const;  // allocations refused since this object was made
};

// While alive, the first |allowed| operator new calls made on this thread succeed and
// every later one throws std::bad_alloc: memory running out at any chosen point of a call.
class FailAllocationsAfter {
 public:
  explicit FailAllocationsAfter(std::size_t allowed);
  ~FailAllocationsAfter();
  FailAllocationsAfter(const FailAllocationsAfter&) = delete;
  FailAllocationsAfter& operator=(const FailAllocationsAfter&) = delete;
  std::size_t refused() const;  // allocations refused since this object was made
};

}  // namespace vkattn::test
