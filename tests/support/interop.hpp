// The interop tests' engine (support/engine.hpp) as vkattn sees it, and a fixture that
// makes one and fails the test on any validation message it receives.
#pragma once

#include <gtest/gtest.h>

#include <optional>

#include "support/backends.hpp"
#include "support/engine.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {

inline ExternalVulkan external(const Engine& e) {
  ExternalVulkan v;
  v.instance = e.instance();
  v.physical_device = e.physical();
  v.device = e.device();
  v.queue_family_index = e.family();
  v.queue = e.queue();
  v.api_version = e.api_version();
  v.device_create_info = e.device_create_info();
  return v;
}

inline DeviceOptions interop_options() {
  DeviceOptions o;
  o.pipeline_cache_dir = test_cache_dir();
  o.submit_timeout_ms = kTestSubmitTimeoutMs;
  return o;
}

// A test with an engine (made by make_engine(), by default a plain one), whose validation
// messages fail the test.
class Interop : public ::testing::Test {
 protected:
  virtual void make_engine() { engine_.emplace(); }
  void SetUp() override {
    try {
      make_engine();
    } catch (const std::exception& e) {
      if (vulkan_required()) FAIL() << "no Vulkan engine: " << e.what();
      GTEST_SKIP() << "no Vulkan engine: " << e.what();
    }
  }
  void TearDown() override {
    if (!engine_) return;
    for (const auto& m : engine_->messages()) ADD_FAILURE() << "validation: " << m;
  }
  Engine& engine() { return *engine_; }
  std::optional<Engine> engine_;
};

}  // namespace vkattn::test
