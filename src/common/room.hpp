// Room made ahead, so that the pushes after it cannot throw: a list's bookkeeping grows
// within it once an op is recorded (nothing may fail then).
#pragma once

#include <algorithm>
#include <cstddef>

namespace vkattn::detail {

// Room in |v| for |n| more, grown geometrically: an exact reserve would reallocate on
// every op, and recording a list would cost time quadratic in its ops (0.14.4).
template <class V>
void reserve_room(V& v, std::size_t n) {
  if (v.capacity() - v.size() < n) v.reserve(std::max(v.size() + n, 2 * v.capacity()));
}

}  // namespace vkattn::detail
