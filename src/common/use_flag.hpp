// One thread at a time (command_list.hpp, docs/reliability.md): a list and a cache each
// carry a UseFlag that a public call holds while it runs, so that a second thread coming
// in meanwhile gets InvalidArgument rather than racing on their vectors (and in Python,
// crashing the interpreter). It catches calls that overlap, not a hand-over without a
// happens-before that happens not to overlap.
#pragma once

#include <atomic>

#include "vkattn/error.hpp"

namespace vkattn::detail {

class UseFlag {
 public:
  // Holds the flag; throws InvalidArgument(op, param, held, rule) when a call holds it now.
  void take(const char* op, const char* param, const char* held, const char* rule) const {
    if (held_.exchange(true, std::memory_order_acquire)) throw InvalidArgument(op, param, held, rule);
  }
  void give_back() const noexcept { held_.store(false, std::memory_order_release); }

 private:
  mutable std::atomic<bool> held_{false};
};

}  // namespace vkattn::detail
