// Asynchronous submission: the public Submitted handle, CommandList::submit and wait, and
// what a backend that runs lists at once (the CPU reference) does for them.
#include <new>

#include "common/command_list_impl.hpp"
#include "common/heap_ledger.hpp"
#include "common/kv_cache_impl.hpp"
#include "vkattn/error.hpp"

namespace vkattn {

namespace detail {

SubmittedImpl::~SubmittedImpl() = default;

std::shared_ptr<SubmittedImpl> CommandListImpl::submit(const SemaphoreSync* sync) {
  if (sync) {
    throw InvalidArgument("submit", "semaphores", "given to a list of the CPU backend",
                          "none (semaphores belong to a Vulkan backend on the caller's device)");
  }
  submit_and_wait();
  return nullptr;
}

}  // namespace detail

Submitted::Submitted(std::shared_ptr<detail::SubmittedImpl> impl) : impl_(std::move(impl)) {}

bool Submitted::ready() const { return !impl_ || impl_->ready(); }

bool Submitted::wait(std::uint64_t timeout_ns) const { return !impl_ || impl_->wait(timeout_ns); }

Submitted CommandList::submit() try {
  const detail::InUse use(impl_.get(), "submit");
  const detail::CachesInUse caches_use(use->caches, "submit");
  use->check_planned("submit");
  use->recorded_recipes = 0;  // its replays are the list's own to submit from here
  return Submitted(use->submitting([&] { return use->submit(nullptr); }));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("submit");
}

bool CommandList::wait(std::uint64_t timeout_ns) const try {
  return detail::InUse(impl_.get(), "wait")->wait(timeout_ns);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("wait");
}

}  // namespace vkattn
