// The C API's machinery: the handle structs (each wraps its C++ object), the boundary every
// exported function goes through (no exception crosses it; the message stays per thread),
// and the checks C adds to the C++ API's own (NULL pointers, struct sizes, arrays).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vkattn/vkattn.h"
#include "vkattn/vkattn.hpp"

struct vkattn_backend {
  std::unique_ptr<vkattn::Backend> impl;
  std::string device_name;
  std::vector<std::string> messages;  // the last vkattn_backend_validation_messages
  std::vector<const char*> message_ptrs;
};
struct vkattn_tensor {
  vkattn::Tensor impl;
};
struct vkattn_command_list {
  vkattn::CommandList impl;
  std::vector<vkattn::OpTiming> timings;  // of the last submission

  // Runs a submission |f| of the list. The last one's timings go once this one is past
  // its checks: a refused call (InvalidArgument) changes nothing.
  template <class F>
  auto submitting(F f) -> decltype(f()) {
    try {
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        timings.clear();
      } else {
        auto r = f();
        timings.clear();
        return r;
      }
    } catch (const vkattn::InvalidArgument&) {
      throw;
    } catch (...) {
      timings.clear();
      throw;
    }
  }
};
struct vkattn_submission {
  vkattn::Submitted impl;
};
struct vkattn_kv_cache {
  vkattn::KvCache impl;
  // What vkattn_kv_cache_get_config's rope_config points to (filled by it).
  mutable vkattn_rope_config rope{};
  mutable std::vector<double> freq_factors;
};
struct vkattn_device_list {
  std::vector<vkattn::DeviceInfo> devices;
};

namespace vkattn::c_api {

void clear_last_error() noexcept;
inline constexpr const char* kLostMessage = "vkattn: out of host memory (the error message was lost)";
// The last failure's parts on this thread (strings valid until the next failure or clear).
struct LastErrorParts {
  const char *op, *call, *param, *message;
  int vk_result;
};
LastErrorParts last_error_parts() noexcept;
// Inside a catch block: the status of the exception in flight; records its message.
vkattn_status status_of_current_exception() noexcept;

// Every exported function's body runs through this: it clears this thread's last error,
// and turns any exception into a status and the exception's message.
template <class Body>
vkattn_status guarded(Body&& body) noexcept {
  clear_last_error();
  try {
    body();
    return VKATTN_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

// |p| itself, or InvalidArgument naming |function| and |param| when it is NULL.
template <class T>
T& need(const char* function, const char* param, T* p) {
  if (!p) throw InvalidArgument(function, param, "NULL", "a valid pointer or handle");
  return *p;
}

// The array (|p|, |n|): empty for (NULL, 0); NULL with n > 0 is an error, and so is a
// count no array can have. The ops check each count before they read the array.
template <class T>
std::span<const T> array(const char* function, const char* param, const T* p, std::uint64_t n) {
  if (!p && n != 0) {
    throw InvalidArgument(function, param, "NULL with count " + std::to_string(n), "a pointer to count values, or count 0");
  }
  constexpr std::uint64_t most = static_cast<std::uint64_t>(PTRDIFF_MAX) / sizeof(T);
  if (n > most) {
    throw InvalidArgument(function, std::string(param) + "'s count", std::to_string(n), "[0, " + std::to_string(most) + "]");
  }
  return p ? std::span<const T>(p, static_cast<std::size_t>(n)) : std::span<const T>();
}

// A config's array, which an op takes with exactly |want| values or none: any other count
// is refused before the array is read, as the caller's array holds only what it counts.
template <class T>
std::span<const T> config_array(const char* function, const std::string& param, const T* p, std::uint64_t n, std::uint64_t want,
                                const char* want_name) {
  if (n != 0 && n != want) {
    const std::size_t arrow = param.rfind("->");
    const std::string count = param.substr(0, arrow + 2) + "n_" + param.substr(arrow + 2);
    throw InvalidArgument(function, count, std::to_string(n), "0 or " + std::string(want_name) + " = " + std::to_string(want));
  }
  return array(function, param.c_str(), p, n);
}

// Device |index| of |list|, or InvalidArgument naming the count.
inline const DeviceInfo& device_at(const char* function, const vkattn_device_list& list, std::size_t index) {
  if (index >= list.devices.size()) {
    throw InvalidArgument(function, "index", std::to_string(index), "[0, count = " + std::to_string(list.devices.size()) + ")");
  }
  return list.devices[index];
}

// *tensor = a new handle for what |make| returns given the backend and the shape; NULL
// first, so that it stays NULL on an error.
template <class Make>
void new_tensor(const char* fn, vkattn_backend* backend, const std::size_t* shape, std::size_t rank, vkattn_tensor** tensor,
                Make&& make) {
  need(fn, "tensor", tensor) = nullptr;
  vkattn_backend& b = need(fn, "backend", backend);
  const auto dims = array(fn, "shape", shape, rank);
  auto t = std::make_unique<vkattn_tensor>();
  t->impl = make(b, vkattn::Shape(dims.begin(), dims.end()));
  *tensor = t.release();
}

// Appending a field must not fit in tail padding (sizeof would not change, and struct_size
// could not tell the versions apart): every struct ends on an 8-byte boundary, no padding.
#define VKATTN_ENDS_WITHOUT_PADDING(T, last) static_assert(sizeof(T) == offsetof(T, last) + sizeof(T::last) && sizeof(T) % 8 == 0)

// The size of each struct's first version: callers built against it stay supported. When
// a field is appended to a struct, pin its entry here to the old sizeof (the interop
// header's vkattn_external_vulkan: in c_api_vulkan.cpp, the one file that sees Vulkan types).
template <class T>
inline constexpr std::size_t kFirstSize = sizeof(T);
template <>
inline constexpr std::size_t kFirstSize<vkattn_command_stats> = offsetof(vkattn_command_stats, encodings);
template <>  // 0.2's: before M-RoPE
inline constexpr std::size_t kFirstSize<vkattn_rope_config> = offsetof(vkattn_rope_config, mrope_sections);
template <>  // 0.2's: before chunk, window_type and the query temperature
inline constexpr std::size_t kFirstSize<vkattn_attention_config> = offsetof(vkattn_attention_config, chunk);
template <>  // 0.4's: before V of its own width
inline constexpr std::size_t kFirstSize<vkattn_kv_cache_config> = offsetof(vkattn_kv_cache_config, v_head_dim);
template <>  // the first header's, before the kernel family (0.1 to 0.5 end at reserved)
inline constexpr std::size_t kFirstSize<vkattn_device_options> = offsetof(vkattn_device_options, kernels);
template <>  // 0.1's: before the matrix units
inline constexpr std::size_t kFirstSize<vkattn_device_info> = offsetof(vkattn_device_info, matrix_units);
template <>  // 0.6's: before sparse
inline constexpr std::size_t kFirstSize<vkattn_attention_run> = offsetof(vkattn_attention_run, sparse);

// The most bytes a caller's struct may say it has: room for any later header's fields, and
// a bound on what a garbage struct_size (a struct never _init-ed) makes us read or zero.
inline constexpr std::size_t kMaxStructSize = 4096;

// An input struct as this library knows it: the caller's fields over our defaults (so a
// struct from an older header gets the defaults of the fields it lacks), after checking
// that fields of a newer header that we do not know are zero (their old behaviour).
// |defaults| also fills a NULL struct where |optional|.
template <class T>
T read_struct(const char* function, const char* param, const T* p, void (*defaults)(T&), bool optional) {
  T out{};
  defaults(out);
  if (!p) {
    if (!optional) need(function, param, p);
    return out;
  }
  const std::string field = std::string(param) + "->struct_size";
  if (p->struct_size < kFirstSize<T> || p->struct_size > kMaxStructSize) {
    throw InvalidArgument(function, field, std::to_string(p->struct_size),
                          "[" + std::to_string(kFirstSize<T>) + ", " + std::to_string(kMaxStructSize) +
                              "] (fill the struct with its vkattn_*_init(&s, sizeof s))");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(p);
  for (std::size_t i = sizeof(T); i < p->struct_size; ++i) {
    if (bytes[i] != 0) {
      throw InvalidArgument(function, field, std::to_string(p->struct_size),
                            "<= " + std::to_string(sizeof(T)) + ", or larger with zeros past byte " + std::to_string(sizeof(T)) +
                                ": vkattn " VKATTN_VERSION_STRING " does not know the fields there (byte " + std::to_string(i) +
                                " is set)");
    }
  }
  std::memcpy(&out, p, std::min<std::size_t>(p->struct_size, sizeof(T)));
  out.struct_size = static_cast<std::uint32_t>(sizeof(T));
  return out;
}

// Fills the caller's struct of |size| bytes from |value|: the fields both know, zeros past
// ours. For the _init functions and output structs.
template <class T>
void write_struct(const char* function, const char* param, T* p, std::size_t size, T value) {
  need(function, param, p);
  if (size < kFirstSize<T> || size > kMaxStructSize) {
    throw InvalidArgument(
        function, std::string(param) + " size", std::to_string(size),
        "[" + std::to_string(kFirstSize<T>) + ", " + std::to_string(kMaxStructSize) + "] (pass sizeof the struct)");
  }
  value.struct_size = static_cast<std::uint32_t>(size);
  auto* bytes = reinterpret_cast<unsigned char*>(p);
  if (size > sizeof(T)) std::memset(bytes + sizeof(T), 0, size - sizeof(T));
  std::memcpy(bytes, &value, std::min(size, sizeof(T)));
}

// The C++ form of the C structs (vkattn.h says which zeros mean "unset").
DeviceOptions device_options(const char* function, const vkattn_device_options* options);
// |head_dim| and |n_heads|: the op's, which its config arrays' counts must fit (0 where
// its tensors lack that dim, which the op refuses; a nonzero count is refused first).
// |of_cache|: a KV cache's RoPE, whose dims are named as the cache's own check names them.
RopeConfig rope_config(const char* function, const char* param, const vkattn_rope_config* config, std::size_t head_dim,
                       bool of_cache = false);
AttentionConfig attention_config(const char* function, const vkattn_attention_config* config, std::size_t n_heads);
AttentionTokens attention_tokens(const char* function, const vkattn_attention_tokens* tokens, bool optional);
KvCacheConfig kv_cache_config(const char* function, const vkattn_kv_cache_config* config);
CommandListOptions command_list_options(const char* function, const vkattn_command_list_options* options);
// And back: the C forms of what the library reports.
vkattn_device_limits c_limits(const DeviceLimits& limits);
vkattn_rope_config c_rope_config(const RopeConfig& config);
vkattn_kv_cache_config c_kv_cache_config(const KvCacheConfig& config);  // rope_config NULL

}  // namespace vkattn::c_api
