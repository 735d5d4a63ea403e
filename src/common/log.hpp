// A backend's log: DeviceOptions::log (or stderr) at DeviceOptions::log_level (or
// $VKATTN_LOG). Shared by everything that reports, from any thread.
#pragma once

#include <string>

#include "vkattn/types.hpp"

namespace vkattn::detail {

class Logger {
 public:
  explicit Logger(const DeviceOptions& options);

  bool enabled(LogLevel level) const { return level != LogLevel::off && level <= threshold_; }
  // Never throws: a message that cannot be delivered is dropped.
  void log(LogLevel level, const std::string& message) const noexcept;

 private:
  LogCallback callback_;
  LogLevel threshold_ = LogLevel::warning;
};

}  // namespace vkattn::detail
