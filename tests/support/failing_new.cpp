// Replaces the global operator new and delete of the program it is linked into (over
// malloc and free, which sanitizers still watch) so that FailLargeAllocations and
// FailAllocationsAfter can refuse allocations on one thread.
#include "support/failing_new.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local std::size_t t_fail_from = 0;  // 0: allocations succeed
thread_local bool t_counting = false;      // FailAllocationsAfter: |t_allowed| more succeed
thread_local std::size_t t_allowed = 0;
thread_local std::size_t t_refused = 0;

bool refuse(std::size_t n) {
  if (t_fail_from && n >= t_fail_from) return true;
  if (!t_counting) return false;
  if (t_allowed == 0) return true;
  --t_allowed;
  return false;
}

void* allocate(std::size_t n) {
  if (refuse(n)) {
    ++t_refused;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace vkattn::test {

FailLargeAllocations::FailLargeAllocations(std::size_t bytes) {
  t_fail_from = bytes;
  t_refused = 0;
}
FailLargeAllocations::~FailLargeAllocations() { t_fail_from = 0; }
std::size_t FailLargeAllocations::refused() const { return t_refused; }

FailAllocationsAfter::FailAllocationsAfter(std::size_t allowed) {
  t_counting = true;
  t_allowed = allowed;
  t_refused = 0;
}
FailAllocationsAfter::~FailAllocationsAfter() { t_counting = false; }
std::size_t FailAllocationsAfter::refused() const { return t_refused; }

}  // namespace vkattn::test
