// expect_close: |got - want| <= atol + rtol * |want| element-wise, NaN and Inf parity,
// and on failure the first mismatch with its coordinates plus max error over all.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "vkattn/types.hpp"

namespace vkattn::test {

inline std::string coords(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> c(shape.size());
  for (std::size_t i = shape.size(); i-- > 0;) {
    c[i] = flat % shape[i];
    flat /= shape[i];
  }
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < c.size(); ++i) s << (i ? "," : "") << c[i];
  s << ']';
  return s.str();
}

inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, const Shape& shape,
                                            double atol, double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  std::size_t bad = 0, first = 0;
  double max_err = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
    } else {
      const double err = std::fabs(g - w);
      max_err = std::max(max_err, err);
      ok = err <= atol + rtol * std::fabs(w);
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess() << "max abs error " << max_err;
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ (atol " << atol << ", rtol " << rtol
                                       << "); first at " << coords(first, shape) << ": got " << got[first] << ", want "
                                       << want[first] << "; max abs error " << max_err;
}

}  // namespace vkattn::test
