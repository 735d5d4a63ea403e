// Kernels (the embedded SPIR-V), pipelines built from them, and the per-device
// VkPipelineCache persisted under the cache directory.
#pragma once

#include <vulkan/vulkan.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/inline_vector.hpp"
#include "common/log.hpp"
#include "vulkan/functions.hpp"

namespace vkattn::detail {

class Device;
struct PhysicalDevice;

enum class KernelId {
#define VKATTN_KERNEL(name) name,
#define VKATTN_KERNEL_LEAN(name, ...) name,
#include "kernel_list.inc"
#undef VKATTN_KERNEL_LEAN
#undef VKATTN_KERNEL
};

const char* kernel_name(KernelId id);
std::span<const std::uint32_t> kernel_spirv(KernelId id);

// Specialization constants a kernel may take: ids up to 27 (the group decode kernel's
// VKATTN_SPEC_DECODE_MASK_KEYS; 24 is VKATTN_SPEC_KV_PAGE). spec() throws past it.
inline constexpr std::size_t kMaxSpecConstants = 28;
using SpecConstants = InlineVector<std::uint32_t, kMaxSpecConstants>;
// Specialization constants by id (shaders/common/params.h: VKATTN_SPEC_*), in any order:
// element i is constant_id i; ids not given are 0.
SpecConstants spec(std::initializer_list<std::pair<std::uint32_t, std::uint32_t>> values);
// The module a pipeline of |id| with constants |spec| is built from: the kernel's lean twin
// where it has one and |spec| meets its rules (f32 or f16 K and V, keys stored rotated, no
// load-only probe: shaders/CMakeLists.txt), else the kernel.
std::span<const std::uint32_t> kernel_spirv(KernelId id, const SpecConstants& spec);

// What makes two pipelines different. spec[0] is the workgroup size (constant_id 0);
// spec[i] is constant_id i.
struct PipelineKey {
  KernelId kernel;
  SpecConstants spec;
  // Set by the command list from the dispatch's bindings and push constants
  // (finish_dispatch), so that neither can disagree with them:
  std::uint32_t n_bindings = 0;      // descriptors at bindings 0..n-1
  std::uint32_t push_bytes = 0;      // push-constant block size
  std::uint32_t texel_bindings = 0;  // bit i: binding i is a uniform texel buffer
  std::uint32_t subgroup_size = 0;   // required, with full subgroups (needs
                                     // DeviceLimits::subgroup_size_control); 0: any
  auto operator<=>(const PipelineKey&) const = default;
};

class Pipeline {
 public:
  // |capture|: built with VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR (the device has
  // VK_KHR_pipeline_executable_properties enabled), so that statistics() can be read.
  Pipeline(const VulkanFunctions& fn, VkDevice device, VkPipelineCache cache, const PipelineKey& key, bool capture = false);
  // Each executable's statistics as "name: stat value, ..." lines (registers, spills, local
  // memory on NVIDIA); empty when not captured or the driver reports none.
  std::vector<std::string> statistics() const;
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  VkPipeline handle() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  const PipelineKey& key() const { return key_; }

 private:
  void release();
  const VulkanFunctions& fn_;
  VkDevice device_;
  PipelineKey key_;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

// Builds pipelines on first use and keeps them for the device's lifetime; any thread may
// ask at once (a pipeline is built outside the lock, so threads needing different
// pipelines build them in parallel; two asking for the same one may both build it, and
// one copy is kept). The VkPipelineCache is loaded from and saved to
// <dir>/<pipelineCacheUUID>-<driver>.bin; a file that cannot be read, is invalid or
// cannot be written is a warning in the log (it only costs compile time), each build an
// info line with its time.
class PipelineCache {
 public:
  PipelineCache(Device& device, const PhysicalDevice& physical, std::string dir, std::shared_ptr<const Logger> log);
  // Builds into a VkPipelineCache the caller owns (ExternalVulkan::pipeline_cache): neither
  // saved nor destroyed here.
  PipelineCache(Device& device, VkPipelineCache borrowed, std::shared_ptr<const Logger> log);
  ~PipelineCache();
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  const Pipeline& get(const PipelineKey& key);
  const std::string& file() const { return file_; }
  void save() const;

 private:
  void load(const PhysicalDevice& physical, std::vector<char>& blob) const;
  std::string write_file() const;  // why it could not be written; empty when it was (or nothing to write)
  const VulkanFunctions& fn_;
  VkDevice device_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  bool owned_ = true;
  bool stats_ = false;  // VKATTN_PIPELINE_STATS=1 on a device that can: log each build's
  std::string file_;
  std::shared_ptr<const Logger> log_;
  mutable std::mutex mutex_;       // guards pipelines_
  mutable std::mutex save_mutex_;  // one save() at a time, and save_warned_
  mutable bool save_warned_ = false;
  std::map<PipelineKey, std::unique_ptr<Pipeline>> pipelines_;
};

// $XDG_CACHE_HOME/vkattn, else $HOME/.cache/vkattn, else "" (no cache).
std::string default_pipeline_cache_dir();

}  // namespace vkattn::detail
