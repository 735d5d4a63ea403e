#include "vulkan/pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <utility>

#include "params.h"
#include "vulkan/check.hpp"
#include "vulkan/device.hpp"

namespace vkattn::detail {

SpecConstants spec(std::initializer_list<std::pair<std::uint32_t, std::uint32_t>> values) {
  SpecConstants out;
  for (const auto& [id, value] : values) {
    if (id >= out.size()) out.resize(id + 1);  // throws past kMaxSpecConstants
    out[id] = value;
  }
  return out;
}

namespace {
#include "kernel_spirv.inc"

// A kernel's module and, where it has one, its lean twin (shaders/CMakeLists.txt:
// vkattn_lean_twin) with the rules that choose it: constant |id| given and at most |max|.
struct LeanRule {
  std::uint32_t id;
  std::uint32_t max;
};
inline constexpr std::size_t kMaxLeanRules = 4;

struct KernelEntry {
  const char* name;
  std::span<const std::uint32_t> words;
  std::span<const std::uint32_t> lean;
  LeanRule rules[kMaxLeanRules];
  std::size_t n_rules;
};

constexpr KernelEntry with_lean(const char* name, std::span<const std::uint32_t> words, std::span<const std::uint32_t> lean,
                                std::initializer_list<LeanRule> rules) {
  KernelEntry e{name, words, lean, {}, rules.size()};
  std::size_t i = 0;
  for (const LeanRule& r : rules) {
    if (i < kMaxLeanRules) e.rules[i++] = r;  // more fail the static_assert below
  }
  return e;
}

constexpr KernelEntry kKernels[] = {
#define VKATTN_KERNEL(name) {#name, vkattn_spv_##name, {}, {}, 0},
#define VKATTN_KERNEL_LEAN(name, ...) with_lean(#name, vkattn_spv_##name, vkattn_spv_##name##_lean, {__VA_ARGS__}),
#define VKATTN_LEAN_RULE(id, max) \
  LeanRule { id, max }
#include "kernel_list.inc"
#undef VKATTN_LEAN_RULE
#undef VKATTN_KERNEL_LEAN
#undef VKATTN_KERNEL
};
static_assert(std::ranges::all_of(kKernels, [](const KernelEntry& e) { return e.n_rules <= kMaxLeanRules; }),
              "a lean twin has more rules than kMaxLeanRules");
}  // namespace

// The specialization constants as "128,4,...", for messages.
static std::string spec_string(const PipelineKey& key) {
  std::string spec;
  for (std::uint32_t v : key.spec) {
    if (!spec.empty()) spec += ',';
    spec += std::to_string(v);
  }
  return spec;
}

const char* kernel_name(KernelId id) { return kKernels[static_cast<std::size_t>(id)].name; }

std::span<const std::uint32_t> kernel_spirv(KernelId id) { return kKernels[static_cast<std::size_t>(id)].words; }

std::span<const std::uint32_t> kernel_spirv(KernelId id, const SpecConstants& spec) {
  const KernelEntry& e = kKernels[static_cast<std::size_t>(id)];
  // Every rule met: the twin. A constant left out takes the shader's default, which the
  // twin may not share; the full module then.
  bool lean = !e.lean.empty();
  for (std::size_t i = 0; i < e.n_rules; ++i) {
    lean = lean && e.rules[i].id < spec.size() && spec[e.rules[i].id] <= e.rules[i].max;
  }
  return lean ? e.lean : e.words;
}

Pipeline::Pipeline(const VulkanFunctions& fn, VkDevice device, VkPipelineCache cache, const PipelineKey& key, bool capture)
    : fn_(fn), device_(device), key_(key) {
  // Members are released by the destructor, which a throwing constructor does not run:
  // clean up through a guard until the pipeline is complete.
  struct Guard {
    Pipeline* p;
    ~Guard() {
      if (p) p->release();
    }
  } guard{this};

  const auto spirv = kernel_spirv(key.kernel, key.spec);
  auto module = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  module.codeSize = spirv.size_bytes();
  module.pCode = spirv.data();
  VKATTN_VK_CREATE(module_, fn_.vkCreateShaderModule(device_, &module, fn_.allocator, &module_));

  std::vector<VkDescriptorSetLayoutBinding> bindings(key.n_bindings);
  for (std::uint32_t i = 0; i < key.n_bindings; ++i) {
    const bool texel = (key.texel_bindings >> i) & 1u;
    bindings[i] = {i, texel ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                   VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  }
  auto set = vk_struct<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  set.bindingCount = key.n_bindings;
  set.pBindings = bindings.data();
  VKATTN_VK_CREATE(set_layout_, fn_.vkCreateDescriptorSetLayout(device_, &set, fn_.allocator, &set_layout_));

  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, key.push_bytes};
  auto layout = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  layout.setLayoutCount = 1;
  layout.pSetLayouts = &set_layout_;
  layout.pushConstantRangeCount = key.push_bytes ? 1 : 0;
  layout.pPushConstantRanges = &push;
  VKATTN_VK_CREATE(layout_, fn_.vkCreatePipelineLayout(device_, &layout, fn_.allocator, &layout_));

  std::vector<VkSpecializationMapEntry> entries(key.spec.size());
  for (std::uint32_t i = 0; i < key.spec.size(); ++i) {
    entries[i] = {i, i * 4u, 4u};
  }
  VkSpecializationInfo spec{static_cast<std::uint32_t>(entries.size()), entries.data(), key.spec.size() * 4u, key.spec.data()};
  auto info = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  info.stage = vk_struct<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module_;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = &spec;
  auto required = vk_struct<VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT>(
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT);
  if (key.subgroup_size) {
    required.requiredSubgroupSize = key.subgroup_size;
    info.stage.pNext = &required;
    info.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
  }
  if (capture) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  info.layout = layout_;
  VKATTN_VK_CREATE(pipeline_, fn_.vkCreateComputePipelines(device_, cache, 1, &info, fn_.allocator, &pipeline_));
  guard.p = nullptr;
}

Pipeline::~Pipeline() { release(); }

std::vector<std::string> Pipeline::statistics() const {
  std::vector<std::string> lines;
  if (!fn_.vkGetPipelineExecutablePropertiesKHR || !fn_.vkGetPipelineExecutableStatisticsKHR) return lines;
  auto pipeline = vk_struct<VkPipelineInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR);
  pipeline.pipeline = pipeline_;
  std::uint32_t n = 0;
  if (fn_.vkGetPipelineExecutablePropertiesKHR(device_, &pipeline, &n, nullptr) != VK_SUCCESS) return lines;
  std::vector<VkPipelineExecutablePropertiesKHR> props(
      n, vk_struct<VkPipelineExecutablePropertiesKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR));
  if (fn_.vkGetPipelineExecutablePropertiesKHR(device_, &pipeline, &n, props.data()) != VK_SUCCESS) return lines;
  for (std::uint32_t e = 0; e < n; ++e) {
    auto exec = vk_struct<VkPipelineExecutableInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR);
    exec.pipeline = pipeline_;
    exec.executableIndex = e;
    std::uint32_t m = 0;
    if (fn_.vkGetPipelineExecutableStatisticsKHR(device_, &exec, &m, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> stats(
        m, vk_struct<VkPipelineExecutableStatisticKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR));
    if (fn_.vkGetPipelineExecutableStatisticsKHR(device_, &exec, &m, stats.data()) != VK_SUCCESS) continue;
    std::string line = std::string(props[e].name) + " (subgroup " + std::to_string(props[e].subgroupSize) + "):";
    for (std::uint32_t i = 0; i < m; ++i) {
      const VkPipelineExecutableStatisticKHR& st = stats[i];
      std::string value;
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: value = st.value.b32 ? "true" : "false"; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: value = std::to_string(st.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: value = std::to_string(st.value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: value = std::to_string(st.value.f64); break;
        default: value = "?";
      }
      line += std::string(i ? ", " : " ") + st.name + " = " + value;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

void Pipeline::release() {
  if (pipeline_) fn_.vkDestroyPipeline(device_, pipeline_, fn_.allocator);
  if (layout_) fn_.vkDestroyPipelineLayout(device_, layout_, fn_.allocator);
  if (set_layout_) fn_.vkDestroyDescriptorSetLayout(device_, set_layout_, fn_.allocator);
  if (module_) fn_.vkDestroyShaderModule(device_, module_, fn_.allocator);
  pipeline_ = VK_NULL_HANDLE;
  layout_ = VK_NULL_HANDLE;
  set_layout_ = VK_NULL_HANDLE;
  module_ = VK_NULL_HANDLE;
}

std::string default_pipeline_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/vkattn";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/vkattn";
  return {};
}

PipelineCache::PipelineCache(Device& device, const PhysicalDevice& physical, std::string dir, std::shared_ptr<const Logger> log)
    : fn_(device.fn()), device_(device.handle()), stats_(device.pipeline_stats()), log_(std::move(log)) {
  std::vector<char> blob;
  if (!dir.empty()) {
    static const char* hex = "0123456789abcdef";
    std::string uuid;
    for (std::uint8_t b : physical.uuid) {
      uuid += hex[b >> 4];
      uuid += hex[b & 15];
    }
    file_ = dir + "/" + uuid + "-" + std::to_string(physical.driver_version) + ".bin";
    load(physical, blob);
  }
  auto info = vk_struct<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  info.initialDataSize = blob.size();
  info.pInitialData = blob.empty() ? nullptr : blob.data();
  const VkResult r = fn_.vkCreatePipelineCache(device_, &info, fn_.allocator, &cache_);
  if (r != VK_SUCCESS) {
    cache_ = VK_NULL_HANDLE;  // undefined after a failure (VKATTN_VK_CREATE)
    log_->log(LogLevel::warning,
              "pipeline cache " + file_ + " rejected by the driver (" + vk_result_name(r) + "); starting empty");
    info.initialDataSize = 0;
    info.pInitialData = nullptr;
    VKATTN_VK_CREATE(cache_, fn_.vkCreatePipelineCache(device_, &info, fn_.allocator, &cache_));
  }
}

PipelineCache::PipelineCache(Device& device, VkPipelineCache borrowed, std::shared_ptr<const Logger> log)
    : fn_(device.fn()), device_(device.handle()), cache_(borrowed), owned_(false), log_(std::move(log)) {}

// The file's data into |blob|, when it is there, readable and a cache of this device
// (Vulkan's cache header: length, version 1, vendor, device, pipelineCacheUUID).
void PipelineCache::load(const PhysicalDevice& physical, std::vector<char>& blob) const {
  std::error_code ec;
  if (!std::filesystem::exists(file_, ec)) return;  // a first run
  std::ifstream in(file_, std::ios::binary);
  if (in) blob.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) {
    blob.clear();
    log_->log(LogLevel::warning, "pipeline cache " + file_ + " cannot be read; pipelines will be built afresh");
    return;
  }
  std::uint32_t header[2] = {0, 0};
  if (blob.size() >= 32) std::memcpy(header, blob.data(), sizeof(header));
  const bool ours = blob.size() >= 32 && header[0] >= 32 && header[0] <= blob.size() &&
                    header[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
                    std::memcmp(blob.data() + 16, physical.uuid.data(), VK_UUID_SIZE) == 0;
  if (!ours) {
    blob.clear();
    log_->log(LogLevel::warning, "pipeline cache " + file_ +
                                     " is invalid (not a Vulkan pipeline cache of this device); "
                                     "ignored, and replaced when the backend closes");
  }
}

PipelineCache::~PipelineCache() {
  try {
    save();
  } catch (...) {
    // Saving only spares a later run some compile time.
  }
  pipelines_.clear();
  if (cache_ && owned_) fn_.vkDestroyPipelineCache(device_, cache_, fn_.allocator);
}

void PipelineCache::save() const {
  if (file_.empty() || cache_ == VK_NULL_HANDLE) return;
  // Saves one at a time, apart from the pipelines' lock (a save writes megabytes while
  // other threads look pipelines up); the warning goes out after the lock is released, as
  // the caller's log callback may take locks of its own.
  std::string warning;
  {
    std::lock_guard lock(save_mutex_);
    const std::string why = write_file();
    if (!why.empty() && !std::exchange(save_warned_, true)) {
      warning = "pipeline cache " + file_ + " cannot be written (" + why + "); pipelines will be built again next run";
    }
  }
  if (!warning.empty()) log_->log(LogLevel::warning, warning);
}

std::string PipelineCache::write_file() const {
  std::size_t size = 0;
  if (fn_.vkGetPipelineCacheData(device_, cache_, &size, nullptr) != VK_SUCCESS || size == 0) return {};
  std::vector<char> blob(size);
  if (fn_.vkGetPipelineCacheData(device_, cache_, &size, blob.data()) != VK_SUCCESS) return {};
  std::error_code ec;
  const std::filesystem::path path(file_);
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return ec.message();
  // Write a temporary and rename, so that a concurrent reader never sees half a file. Its
  // name is the process's random tag and a count: an address alone repeats across
  // processes (ASan's heaps are laid out alike), and two processes saving at once would
  // then write one temporary.
  static const std::uint64_t process_tag =
      (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  static std::atomic<std::uint64_t> saves{0};
  const std::string tmp = file_ + ".tmp" + std::to_string(process_tag) + "-" + std::to_string(saves.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return "cannot create " + tmp;
    out.write(blob.data(), static_cast<std::streamsize>(size));
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return "writing failed";
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return why;
  }
  return {};
}

const Pipeline& PipelineCache::get(const PipelineKey& key) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = pipelines_.find(key); it != pipelines_.end()) return *it->second;
  }
  // Built unlocked: a build takes seconds on CPU devices, and VkPipelineCache is safe to
  // use from several threads at once.
  const auto start = std::chrono::steady_clock::now();
  auto built = std::make_unique<Pipeline>(fn_, device_, cache_, key, stats_);
  if (stats_) {
    // A developer's probe (VKATTN_PIPELINE_STATS=1): printed whatever the log level.
    const std::string spec = spec_string(key);
    for (const std::string& line : built->statistics()) {
      std::fprintf(stderr, "vkattn: pipeline stats: %s (spec %s): %s\n", kernel_name(key.kernel), spec.c_str(), line.c_str());
    }
  }
  if (log_->enabled(LogLevel::info)) {
    const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
    const std::string spec = spec_string(key);
    char time[32];
    std::snprintf(time, sizeof time, "%.1f", ms.count());
    log_->log(LogLevel::info, std::string("built pipeline ") + kernel_name(key.kernel) + " (spec " + spec +
                                  (key.texel_bindings ? ", texel reads" : "") +
                                  (key.subgroup_size ? ", subgroup " + std::to_string(key.subgroup_size) : "") + ") in " + time +
                                  " ms");
  }
  std::lock_guard lock(mutex_);
  return *pipelines_.try_emplace(key, std::move(built)).first->second;
}

}  // namespace vkattn::detail
