// The environment's knobs that take one of a few names ($VKATTN_KERNELS, $VKATTN_MATRIX,
// ...): unset or empty is the default; any other value is refused by name rather than read
// as the default (VKATTN_VALIDATION=true must not quietly run without the layer).
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "common/op_scope.hpp"
#include "vkattn/error.hpp"

namespace vkattn::detail {

template <class T>
struct EnvChoice {
  const char* name;
  T value;
};

// $|var| among |choices|, |fallback| when unset or empty; another value is InvalidArgument
// naming |op|, the variable, its value and |valid|.
template <class T>
T env_choice(const char* op, const char* var, T fallback, std::initializer_list<EnvChoice<T>> choices, const char* valid) {
  const char* env = std::getenv(var);
  if (!env || !*env) return fallback;
  for (const EnvChoice<T>& c : choices) {
    if (std::strcmp(env, c.name) == 0) return c.value;
  }
  throw InvalidArgument(op, var, env, valid);
}

// $|var| as a switch: "1" on; "0", unset or empty off; refused under the current op
// otherwise.
inline bool env_switch(const char* var) {
  return env_choice(current_op(), var, false, {{"0", false}, {"1", true}}, "1 (on) or 0 (off; also unset or empty)");
}

}  // namespace vkattn::detail
