// The vkattn op in progress on this thread, named by errors raised inside it.
#pragma once

namespace vkattn::detail {

const char* current_op();

// Names the op in progress for errors raised inside it; nests.
class OpScope {
 public:
  explicit OpScope(const char* op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* previous_;
};

}  // namespace vkattn::detail
