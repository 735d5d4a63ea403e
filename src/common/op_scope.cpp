#include "common/op_scope.hpp"

namespace vkattn::detail {

namespace {
thread_local const char* t_current_op = nullptr;
}

const char* current_op() { return t_current_op ? t_current_op : ""; }

OpScope::OpScope(const char* op) : previous_(t_current_op) { t_current_op = op; }
OpScope::~OpScope() { t_current_op = previous_; }

}  // namespace vkattn::detail
