// expect_invalid(f, {parts...}): |f| throws vkattn::InvalidArgument whose message
// contains every part (the parameter, its value, the valid range).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "vkattn/error.hpp"

namespace vkattn::test {

template <class F>
void expect_invalid(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected InvalidArgument mentioning " << *parts.begin();
  } catch (const InvalidArgument& e) {
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace vkattn::test
