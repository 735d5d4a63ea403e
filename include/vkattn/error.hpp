// Errors: vkattn::Error for failures of the device, the driver or memory,
// vkattn::InvalidArgument (a std::invalid_argument) for bad parameters and misuse (empty
// or moved-from handles, objects of another backend, an output that is an input), raised
// before anything is recorded. No other exception leaves vkattn: a failed host
// allocation is Error(out_of_memory), never std::bad_alloc. docs/reliability.md says
// what state each leaves behind.
#pragma once

#include "vkattn/require_cxx20.hpp"  // C++17 code can use the C API, vkattn/vkattn.h

#include <stdexcept>
#include <string>

#include "vkattn/export.h"

namespace vkattn {

enum class ErrorCode {
  vulkan_call_failed,  // a Vulkan call returned an error; vk_result() says which
  no_device,           // no usable Vulkan device (reasons listed in the message)
  device_lost,         // VK_ERROR_DEVICE_LOST: every later call on that backend fails so;
                       // make a new backend
  out_of_memory,       // a device heap or host allocation cannot hold the request (the
                       // message names the heap, the request and the use), or a size
                       // exceeds a device limit; the backend stays usable
  timeout,             // a submission did not finish within DeviceOptions::submit_timeout_ms
                       // (it keeps running; the backend stays usable)
  unsupported,         // the device or installation lacks something that was asked for
};

VKATTN_API const char* to_string(ErrorCode code);

class VKATTN_API Error : public std::runtime_error {
 public:
  // |call| is the failing call or check, |vk_result| the VkResult (0 when none; a failed
  // host allocation, std::bad_alloc, gives VK_ERROR_OUT_OF_HOST_MEMORY's -1), |op| the
  // vkattn operation that was running ("rope", "upload", "create backend", ...).
  Error(ErrorCode code, std::string message, std::string call = {}, int vk_result = 0, std::string op = {});
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
  InvalidArgument(const std::string& op, const std::string& param, const std::string& value, const std::string& valid);
  const std::string& param() const noexcept { return param_; }
  const std::string& op() const noexcept { return op_; }            // since 0.12
  const std::string& message() const noexcept { return message_; }  // without op (0.12)

 private:
  std::string param_;
  std::string op_;
  std::string message_;
};

}  // namespace vkattn
