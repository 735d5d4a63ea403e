// Backend: the one interface both implementations share. The Vulkan backend runs ops on a
// GPU; the CPU backend is the plainly written reference every GPU result is checked
// against. Tensors and command lists belong to the backend that made them.
//
// Threads (both backends; docs/reliability.md has the whole contract):
// - A Backend may be used from any number of threads at once: every member below is safe
//   to call concurrently. Each thread records and submits its own command lists; what the
//   threads share inside (the queue, the pipelines, the memory accounting) is guarded.
// - A CommandList, a KvCache and a Tensor being written are used by one thread at a time
//   (they may move between threads). Recording into a list, submitting it, and kv_append,
//   kv_copy_sequence, reset, truncate and recording attention over a cache (it reads the
//   cache's bookkeeping) count as using it. A call that overlaps another thread's use of
//   the same list or cache throws InvalidArgument (docs/reliability.md: which calls).
// - A tensor may be read by lists of several threads at once, but nothing may read or
//   write it while another thread's list or upload writes it: vkattn orders ops within one
//   list (barriers), never across threads; submit_and_wait returning orders them.
// - The log callback (DeviceOptions::log) runs on the thread whose call caused the message.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vkattn/command_list.hpp"
#include "vkattn/export.h"
#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"

namespace vkattn {

class VKATTN_API Backend {
 public:
  virtual ~Backend();

  virtual BackendKind kind() const = 0;
  virtual std::string device_name() const = 0;
  // Limits ops plan with (after DeviceOptions::cap_limits); nominal values on the CPU.
  virtual const DeviceLimits& limits() const = 0;

  // A new tensor, zero-filled. Every dimension >= 1, at most 2^40 elements; on Vulkan its
  // bytes <= maxStorageBufferRange (the CPU backend counts only its heap).
  Tensor tensor(const Shape& shape, DType dtype);
  virtual CommandList commands(const CommandListOptions& options = {}) = 0;
  // A KV cache, zero-filled and empty. Throws Error(out_of_memory) naming the limit when K
  // or V would exceed the heap or, on Vulkan, maxStorageBufferRange.
  KvCache kv_cache(const KvCacheConfig& config);
  // A cache's whole state as bytes (its configuration, which position each slot holds, and
  // K and V exactly as stored, any dtype), and back into a cache of the same configuration
  // on any backend: a conversation saved to disk and resumed. Save after the lists that
  // wrote the cache have run; restore throws InvalidArgument naming the first field that
  // differs, changing nothing. A restore that fails on the device (out of memory) after
  // it began rewriting K and V leaves every sequence empty, never half restored.
  std::vector<std::uint8_t> save_cache(const KvCache& cache);
  void restore_cache(KvCache& cache, std::span<const std::uint8_t> bytes);

  // Synchronous copies between host and tensor. f32 data converts to f16 tensors (round to
  // nearest even) and back; i32 data goes to i32 tensors. |data| must hold numel() values.
  void upload(Tensor& tensor, std::span<const float> data);
  void upload(Tensor& tensor, std::span<const std::int32_t> data);
  // q8_0 and q4_0 tensors quantize what is uploaded (as kv_append would) and dequantize
  // what is downloaded.
  std::vector<float> download(const Tensor& tensor);
  std::vector<std::int32_t> download_i32(const Tensor& tensor);
  // The storage words as they are (bytes() of them; layouts in docs/), for saving and
  // restoring tensors of any dtype exactly.
  void upload_raw(Tensor& tensor, std::span<const std::uint8_t> bytes);
  std::vector<std::uint8_t> download_raw(const Tensor& tensor);

  // Validation-layer warnings and errors seen so far (Vulkan with validation on).
  virtual std::vector<std::string> validation_messages() const { return {}; }

 protected:
  // Identifies the tensors and command lists this backend made.
  virtual const void* owner_tag() const { return this; }
  virtual std::shared_ptr<detail::TensorImpl> make_tensor(const Shape& shape, DType dtype) = 0;
  virtual void write_words(detail::TensorImpl& t, std::span<const std::uint32_t> words) = 0;
  virtual std::vector<std::uint32_t> read_words(const detail::TensorImpl& t) = 0;
};

// Throws Error(no_device) with each device's rejection reason when no device fits.
VKATTN_API std::unique_ptr<Backend> make_backend(BackendKind kind, const DeviceOptions& options = {});

}  // namespace vkattn
