#include "common/log.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace vkattn {

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::off: return "off";
    case LogLevel::error: return "error";
    case LogLevel::warning: return "warning";
    case LogLevel::info: return "info";
  }
  return "unknown";
}

}  // namespace vkattn

namespace vkattn::detail {

Logger::Logger(const DeviceOptions& options) : callback_(options.log) {
  if (options.log_level) {
    threshold_ = *options.log_level;
    return;
  }
  const char* env = std::getenv("VKATTN_LOG");
  if (!env || !*env) return;
  std::string value(env);
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (LogLevel level : {LogLevel::off, LogLevel::error, LogLevel::warning, LogLevel::info}) {
    if (value == to_string(level)) {
      threshold_ = level;
      return;
    }
  }
  log(LogLevel::warning, std::string("VKATTN_LOG=") + env + " is not off, error, warning or info; using warning");
}

void Logger::log(LogLevel level, const std::string& message) const noexcept {
  if (!enabled(level)) return;
  try {
    if (callback_) {
      callback_(level, message);
    } else {
      std::fprintf(stderr, "vkattn: %s: %s\n", to_string(level), message.c_str());
    }
  } catch (...) {
    // A log line is never worth failing the call that wrote it.
  }
}

}  // namespace vkattn::detail
