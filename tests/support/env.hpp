// The environment variables the tests read (docs/devices.md has the table).
#pragma once

#include <cstdlib>
#include <string_view>

namespace vkattn::test {

// Whether variable |name| is set to exactly |value|.
inline bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v && value == v;
}

// Whether variable |name| is set and not empty.
inline bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// VKATTN_CAP_LIMITS caps every backend a test makes: tests of what the planner picks for
// given limits skip under it.
inline bool limits_capped_by_environment() { return env_set("VKATTN_CAP_LIMITS"); }

}  // namespace vkattn::test
