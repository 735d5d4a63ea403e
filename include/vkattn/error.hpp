// Errors: vkattn::Error for failures of the device or the driver, vkattn::InvalidArgument
// (a std::invalid_argument) for bad parameters, raised before anything is recorded.
#pragma once

#include <stdexcept>
#include <string>

#include "vkattn/export.h"

namespace vkattn {

enum class ErrorCode {
  vulkan_call_failed,  // a Vulkan call returned an error; vk_result() says which
  no_device,           // no usable Vulkan device (reasons listed in the message)
  device_lost,         // VK_ERROR_DEVICE_LOST: the device must be recreated
  out_of_memory,       // host or device allocation failed, or a size exceeds a device limit
  timeout,             // a submission did not finish within DeviceOptions::submit_timeout_ms
  unsupported,         // the device or installation lacks something that was asked for
};

VKATTN_API const char* to_string(ErrorCode code);

class VKATTN_API Error : public std::runtime_error {
 public:
  // |call| is the failing call or check, |vk_result| the VkResult (0 when none), |op| the
  // vkattn operation that was running ("rope", "upload", "create backend", ...).
  Error(ErrorCode code, std::string message, std::string call = {}, int vk_result = 0,
        std::string op = {});
  ErrorCode code() const noexcept { return code_; }
  int vk_result() const noexcept { return vk_result_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& op() const noexcept { return op_; }
  const std::string& message() const noexcept { return message_; }  // without op, call, code

 private:
  ErrorCode code_;
  std::string message_;
  std::string call_;
  int vk_result_;
  std::string op_;
};

// A parameter outside its valid range. what() reads
// "vkattn: <op>: <param> = <value>; valid: <valid>".
class VKATTN_API InvalidArgument : public std::invalid_argument {
 public:
  InvalidArgument(const std::string& op, const std::string& param, const std::string& value,
                  const std::string& valid);
  const std::string& param() const noexcept { return param_; }

 private:
  std::string param_;
};

}  // namespace vkattn
