#include "vulkan/device.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/env.hpp"
#include "vulkan/check.hpp"
#include "vulkan/faults.hpp"
#include "vulkan/instance.hpp"

namespace vkattn::detail {

namespace {

std::string type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

int type_rank(VkPhysicalDeviceType t) {  // lower is preferred
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The largest device-local heap, and whether memory is unified.
void probe_memory(const VulkanFunctions& fn, VkPhysicalDevice pd, DeviceLimits& lim) {
  VkPhysicalDeviceMemoryProperties mem{};
  fn.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (std::uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      lim.device_local_bytes = std::max<std::uint64_t>(lim.device_local_bytes, mem.memoryHeaps[i].size);
    }
  }
  bool any_local = false, all_local_visible = true;
  for (std::uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    const auto f = mem.memoryTypes[i].propertyFlags;
    if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) {
      any_local = true;
      all_local_visible = all_local_visible && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    }
  }
  // Unified memory: every device-local type is also host-visible (integrated GPUs, CPU
  // devices). A discrete GPU with a resizable BAR also has such a type, but not only such.
  lim.unified_memory = any_local && all_local_visible;
}

// The first queue family with compute and its timestamps; a device without one, or below
// the spec's compute minimums, is rejected.
void probe_queue(const VulkanFunctions& fn, VkPhysicalDevice pd, const VkPhysicalDeviceLimits& l, PhysicalDevice& out) {
  DeviceInfo& info = out.info;
  std::uint32_t n = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, families.data());
  const auto compute = std::find_if(families.begin(), families.end(),
                                    [](const VkQueueFamilyProperties& f) { return (f.queueFlags & VK_QUEUE_COMPUTE_BIT) != 0; });
  if (compute == families.end()) {
    info.rejected = "has no compute queue";
    return;
  }
  out.compute_family = static_cast<std::uint32_t>(compute - families.begin());
  info.limits.timestamps = compute->timestampValidBits > 0 && l.timestampPeriod > 0.0f;
  info.limits.timestamp_period_ns = l.timestampPeriod;
  if (l.maxComputeWorkGroupInvocations < 128 || l.maxComputeSharedMemorySize < 16384 ||
      l.maxPerStageDescriptorStorageBuffers < 4 || l.maxPushConstantsSize < 128) {
    info.rejected = "reports compute limits below the Vulkan minimums";
  }
}

}  // namespace

std::string api_version_string(std::uint32_t v, bool patch) {
  std::string s = std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v));
  return patch ? s + "." + std::to_string(VK_API_VERSION_PATCH(v)) : s;
}

std::string hex_string(std::uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%X", v);
  return s;
}

bool pipeline_stats_wanted() { return env_switch("VKATTN_PIPELINE_STATS"); }

bool packed_f16_wanted() {
  return env_choice(current_op(), "VKATTN_PACKED_F16", true, {{"automatic", true}, {"auto", true}, {"off", false}},
                    "automatic (or auto) or off");
}

PhysicalDevice probe_device(const VulkanFunctions& fn, VkPhysicalDevice pd, std::uint32_t index, std::uint32_t instance_api,
                            bool query_coopmat, bool query_nv2) {
  PhysicalDevice out;
  out.handle = pd;
  out.functions = &fn;
  DeviceInfo& info = out.info;
  info.index = index;

  VkPhysicalDeviceProperties base{};
  fn.vkGetPhysicalDeviceProperties(pd, &base);
  info.name = base.deviceName;
  out.kind = base.deviceType;
  info.type = type_name(base.deviceType);
  info.api_version = api_version_string(base.apiVersion);
  out.uuid = std::to_array(base.pipelineCacheUUID);
  out.driver_version = base.driverVersion;
  if (base.apiVersion < VK_API_VERSION_1_1) {
    info.rejected = "supports Vulkan " + info.api_version + "; vkattn needs 1.1";
    return out;
  }
  const bool v12 = base.apiVersion >= VK_API_VERSION_1_2 && instance_api >= VK_API_VERSION_1_2;

  std::uint32_t n = 0;
  VKATTN_VK_CHECK(fn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> exts(n);
  VKATTN_VK_CHECK(fn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()));
  auto has = [&](const char* name) {
    return std::any_of(exts.begin(), exts.end(),
                       [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
  };
  out.portability_subset = has("VK_KHR_portability_subset");
  out.memory_budget = has("VK_EXT_memory_budget");
  CoopmatFacts& cm = out.coopmat;
  cm.vendor_id = base.vendorID;
  cm.vulkan_1_2 = v12;
  cm.listed = has(kCoopmatExtension);
  cm.queried = cm.listed && query_coopmat;
  cm.vulkan_1_3 = base.apiVersion >= VK_API_VERSION_1_3 && instance_api >= VK_API_VERSION_1_3;
  cm.nv2_listed = has(kCoopmat2Extension);
  cm.nv2_queried = cm.nv2_listed && cm.queried && query_nv2 && cm.vulkan_1_3;

  auto subgroup = vk_struct<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto driver = vk_struct<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  auto size_props = vk_struct<VkPhysicalDeviceSubgroupSizeControlPropertiesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT);
  auto props = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  const bool size_control_ext = has("VK_EXT_subgroup_size_control");
  props.pNext = &subgroup;
  if (v12) subgroup.pNext = &driver;
  if (size_control_ext) size_props.pNext = std::exchange(props.pNext, &size_props);
  // Compute units, where the vendor's extension tells them.
  auto nv_sm =
      vk_struct<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
  auto amd_core =
      vk_struct<VkPhysicalDeviceShaderCorePropertiesAMD>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD);
  auto arm_core = vk_struct<VkPhysicalDeviceShaderCoreBuiltinsPropertiesARM>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_BUILTINS_PROPERTIES_ARM);
  const bool has_nv_sm = has(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  const bool has_amd_core = has(VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
  const bool has_arm_core = has(VK_ARM_SHADER_CORE_BUILTINS_EXTENSION_NAME);
  if (has_nv_sm) nv_sm.pNext = std::exchange(props.pNext, &nv_sm);
  if (has_amd_core) amd_core.pNext = std::exchange(props.pNext, &amd_core);
  if (has_arm_core) arm_core.pNext = std::exchange(props.pNext, &arm_core);
  // The matrix path: the extension's stages, and what tells AMD's architectures apart.
  CoopmatProperties coopmat_props{kCoopmatPropertiesType, nullptr, 0};
  if (cm.queried) coopmat_props.pNext = std::exchange(props.pNext, &coopmat_props);
  Coopmat2Properties coopmat2_props{kCoopmat2PropertiesType, nullptr, 0, 0, 0};
  if (cm.nv2_queried) coopmat2_props.pNext = std::exchange(props.pNext, &coopmat2_props);
  auto dot8 = vk_struct<VkPhysicalDeviceShaderIntegerDotProductProperties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES);
  const bool has_dot8 = has(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  if (has_dot8) dot8.pNext = std::exchange(props.pNext, &dot8);
  fn.vkGetPhysicalDeviceProperties2(pd, &props);
  info.driver = v12 ? std::string(driver.driverName) + " " + driver.driverInfo : "version " + std::to_string(base.driverVersion);

  auto storage16 = vk_struct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  auto f16 = vk_struct<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
  auto size_control = vk_struct<VkPhysicalDeviceSubgroupSizeControlFeaturesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT);
  auto executables = vk_struct<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR);
  auto features = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  features.pNext = &storage16;
  if (v12 || has("VK_KHR_shader_float16_int8")) storage16.pNext = &f16;
  if (size_control_ext) size_control.pNext = std::exchange(features.pNext, &size_control);
  const bool executables_ext = has(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  if (executables_ext) executables.pNext = std::exchange(features.pNext, &executables);
  CoopmatFeatures coopmat_features{kCoopmatFeaturesType, nullptr, VK_FALSE, VK_FALSE};
  if (cm.queried) coopmat_features.pNext = std::exchange(features.pNext, &coopmat_features);
  Coopmat2Features coopmat2_features{
      kCoopmat2FeaturesType, nullptr, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE};
  if (cm.nv2_queried) coopmat2_features.pNext = std::exchange(features.pNext, &coopmat2_features);
  // SPIR-V 1.6's workgroup size from specialization constants (LocalSizeId) needs maintenance4.
  auto maintenance4 = vk_struct<VkPhysicalDeviceMaintenance4Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES);
  if (cm.nv2_queried) maintenance4.pNext = std::exchange(features.pNext, &maintenance4);
  auto memory_model =
      vk_struct<VkPhysicalDeviceVulkanMemoryModelFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
  if (v12) memory_model.pNext = std::exchange(features.pNext, &memory_model);
  fn.vkGetPhysicalDeviceFeatures2(pd, &features);
  out.pipeline_stats = executables_ext && executables.pipelineExecutableInfo;

  const VkPhysicalDeviceLimits& l = base.limits;
  DeviceLimits& lim = info.limits;
  const bool compute_subgroups = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  lim.subgroup_size = subgroup.subgroupSize;
  lim.subgroup_arithmetic = compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  lim.subgroup_shuffle = compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  // Kernels that hand values between lanes by index need the subgroup size they were
  // planned for; only a device that can be made to use it (and fill every subgroup) says so.
  out.subgroup_size_control = size_control_ext && size_control.subgroupSizeControl && size_control.computeFullSubgroups &&
                              (size_props.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                              size_props.minSubgroupSize <= subgroup.subgroupSize &&
                              subgroup.subgroupSize <= size_props.maxSubgroupSize;
  lim.subgroup_size_control = compute_subgroups && out.subgroup_size_control;
  if (out.subgroup_size_control) out.max_workgroup_subgroups = size_props.maxComputeWorkgroupSubgroups;
  lim.subgroup_vote = compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_VOTE_BIT);
  lim.subgroup_min_size = lim.subgroup_size_control ? size_props.minSubgroupSize : subgroup.subgroupSize;
  lim.subgroup_max_size = lim.subgroup_size_control ? size_props.maxSubgroupSize : subgroup.subgroupSize;
  if (has_nv_sm) {
    lim.compute_units = nv_sm.shaderSMCount;
  } else if (has_amd_core) {
    lim.compute_units = amd_core.shaderEngineCount * amd_core.shaderArraysPerEngineCount * amd_core.computeUnitsPerShaderArray;
  } else if (has_arm_core) {
    lim.compute_units = arm_core.shaderCoreCount;
  }
  lim.max_shared_memory = l.maxComputeSharedMemorySize;
  lim.max_workgroup_invocations = l.maxComputeWorkGroupInvocations;
  lim.max_workgroup_size = std::to_array(l.maxComputeWorkGroupSize);
  lim.max_workgroup_count = std::to_array(l.maxComputeWorkGroupCount);
  lim.max_storage_buffer_range = l.maxStorageBufferRange;
  lim.max_storage_buffers = l.maxPerStageDescriptorStorageBuffers;
  lim.storage_offset_alignment = l.minStorageBufferOffsetAlignment;
  // Uniform texel buffers of R32G32B32A32_UINT are required by the spec; check anyway.
  VkFormatProperties texel_format{};
  fn.vkGetPhysicalDeviceFormatProperties(pd, VK_FORMAT_R32G32B32A32_UINT, &texel_format);
  const bool texel_ok = (texel_format.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
  lim.max_texel_buffer_elements = texel_ok ? l.maxTexelBufferElements : 0;
  lim.storage_16bit = storage16.storageBuffer16BitAccess;
  lim.shader_float16 = f16.shaderFloat16;

  cm.driver_id = v12 ? static_cast<std::uint32_t>(driver.driverID) : 0;
  cm.nv_warps_per_sm = has_nv_sm ? nv_sm.shaderWarpsPerSM : 0;
  cm.amd_wavefronts_per_simd = has_amd_core ? amd_core.wavefrontsPerSimd : 0;
  cm.amd_mixed_dot8 = has_dot8 && dot8.integerDotProduct4x8BitPackedMixedSignednessAccelerated;
  cm.subgroup_min_size = lim.subgroup_min_size;
  cm.subgroup_max_size = lim.subgroup_max_size;
  cm.feature = coopmat_features.cooperativeMatrix;
  cm.compute = (coopmat_props.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  cm.shader_float16 = lim.shader_float16;
  // With the model enabled, device-scope atomics (the merge kernels') need device scope too.
  cm.memory_model = memory_model.vulkanMemoryModel && memory_model.vulkanMemoryModelDeviceScope;
  cm.full_subgroups = lim.subgroup_size_control;
  if (cm.queried && cm.feature && fn.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR) {
    cm.shapes = coopmat_shapes(fn.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR, pd);
  }
  cm.nv2_features = coopmat2_features.cooperativeMatrixFlexibleDimensions && coopmat2_features.cooperativeMatrixConversions &&
                    coopmat2_features.cooperativeMatrixPerElementOperations && maintenance4.maintenance4;
  cm.nv2_max_dimension = coopmat2_props.cooperativeMatrixFlexibleDimensionsMaxDimension;
  if (cm.nv2_queried && cm.nv2_features && fn.vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV) {
    cm.nv2_flexible = coopmat2_flexible(fn.vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV, pd);
  }
  for (const auto& shape : cm.shapes) info.matrix_shapes.push_back(public_shape(shape));

  probe_memory(fn, pd, lim);
  probe_queue(fn, pd, l, out);
  return out;
}

std::vector<PhysicalDevice> enumerate_devices(const Instance& instance, const DeviceOptions& options) {
  const MatrixUnits knob = matrix_units_wanted(options);
  const bool packed_f16 = packed_f16_wanted();
  OpScope scope("enumerate devices");
  std::uint32_t n = 0;
  const VulkanFunctions& fn = instance.fn();
  VKATTN_VK_CHECK(fn.vkEnumeratePhysicalDevices(instance.handle(), &n, nullptr));
  std::vector<VkPhysicalDevice> handles(n);
  VKATTN_VK_CHECK(fn.vkEnumeratePhysicalDevices(instance.handle(), &n, handles.data()));
  const bool query_coopmat = coopmat_query_allowed(instance.validation_layer_version());
  std::vector<PhysicalDevice> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    out.push_back(probe_device(fn, handles[i], i, instance.api_version(), query_coopmat,
                               coopmat2_query_allowed(instance.validation_layer_version())));
    choose_matrix_path(out.back(), knob);
    out.back().float16 = packed_f16 && out.back().coopmat.vulkan_1_2 && out.back().info.limits.shader_float16;
  }
  return out;
}

void choose_matrix_path(PhysicalDevice& device, MatrixUnits knob) {
  const MatrixChoice choice = choose_matrix(device.coopmat, knob, kCoopmatKernelsBuilt);
  device.matrix_units = choice.units;
  device.matrix_tile = choice.tile;
  device.matrix_nv2 = choice.nv2;
  if (choice.units && !choice.nv2) device.matrix_nv2_note = coopmat2_gap(device.coopmat, kCoopmat2KernelsBuilt);
  device.info.limits.matrix_units = choice.units;
  device.info.limits.matrix_standin = choice.standin;
  device.info.matrix_note = choice.note;
}

std::size_t choose_device(const std::vector<PhysicalDevice>& devices, const DeviceOptions& options) {
  std::string wanted;
  std::string source;
  if (options.device) {
    wanted = *options.device;
    source = "DeviceOptions::device";
  } else if (const char* env = std::getenv("VKATTN_DEVICE"); env && *env) {
    wanted = env;
    source = "VKATTN_DEVICE";
  }
  std::string listing;
  for (const auto& d : devices) {
    listing += "\n  " + std::to_string(d.info.index) + ": " + d.info.name + " (" + d.info.type + ")" +
               (d.info.rejected.empty() ? "" : ": rejected, " + d.info.rejected);
  }
  if (devices.empty()) {
    throw Error(ErrorCode::no_device, "Vulkan found no devices (on Debian, mesa-vulkan-drivers provides the lavapipe CPU device)",
                "vkEnumeratePhysicalDevices", 0, current_op());
  }

  if (!wanted.empty()) {
    const bool numeric =
        std::all_of(wanted.begin(), wanted.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const auto& d = devices[i];
      const bool match =
          numeric ? std::to_string(d.info.index) == wanted : lower(d.info.name).find(lower(wanted)) != std::string::npos;
      if (!match) continue;
      if (!d.info.rejected.empty()) {
        throw Error(ErrorCode::no_device,
                    source + "=\"" + wanted + "\" selects " + d.info.name + ", which is rejected: " + d.info.rejected, "", 0,
                    current_op());
      }
      return i;
    }
    throw Error(ErrorCode::no_device, source + "=\"" + wanted + "\" matches no device; devices:" + listing, "", 0, current_op());
  }

  std::size_t best = devices.size();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].info.rejected.empty()) continue;
    if (best == devices.size() || type_rank(devices[i].kind) < type_rank(devices[best].kind)) best = i;
  }
  if (best == devices.size()) {
    throw Error(ErrorCode::no_device, "no usable Vulkan device:" + listing, "", 0, current_op());
  }
  return best;
}

DeviceLimits cap(const DeviceLimits& d, const DeviceLimits& c) {
  DeviceLimits o = d;
  // A capped subgroup size of 0 means "assume no subgroups".
  o.subgroup_size = std::min(d.subgroup_size, c.subgroup_size);
  o.subgroup_arithmetic = d.subgroup_arithmetic && c.subgroup_arithmetic;
  o.subgroup_shuffle = d.subgroup_shuffle && c.subgroup_shuffle;
  o.subgroup_size_control = d.subgroup_size_control && c.subgroup_size_control;
  o.subgroup_vote = d.subgroup_vote && c.subgroup_vote;
  // Without size control a pipeline cannot ask for a size: the range is the one size.
  o.subgroup_min_size = o.subgroup_size_control ? std::max(d.subgroup_min_size, c.subgroup_min_size) : o.subgroup_size;
  o.subgroup_max_size = o.subgroup_size_control ? std::min(d.subgroup_max_size, c.subgroup_max_size) : o.subgroup_size;
  o.max_shared_memory = std::min(d.max_shared_memory, c.max_shared_memory);
  o.max_workgroup_invocations = std::min(d.max_workgroup_invocations, c.max_workgroup_invocations);
  for (int i = 0; i < 3; ++i) {
    o.max_workgroup_size[i] = std::min(d.max_workgroup_size[i], c.max_workgroup_size[i]);
    o.max_workgroup_count[i] = std::min(d.max_workgroup_count[i], c.max_workgroup_count[i]);
  }
  o.max_storage_buffer_range = std::min(d.max_storage_buffer_range, c.max_storage_buffer_range);
  o.max_storage_buffers = std::min(d.max_storage_buffers, c.max_storage_buffers);
  o.storage_offset_alignment = std::max(d.storage_offset_alignment, c.storage_offset_alignment);
  o.max_texel_buffer_elements = std::min(d.max_texel_buffer_elements, c.max_texel_buffer_elements);
  if (c.device_local_bytes) o.device_local_bytes = std::min(d.device_local_bytes, c.device_local_bytes);
  if (c.compute_units) o.compute_units = d.compute_units ? std::min(d.compute_units, c.compute_units) : c.compute_units;
  o.storage_16bit = d.storage_16bit && c.storage_16bit;
  o.shader_float16 = d.shader_float16 && c.shader_float16;
  o.timestamps = d.timestamps && c.timestamps;
  o.unified_memory = d.unified_memory && c.unified_memory;
  o.matrix_units = d.matrix_units && c.matrix_units;
  o.matrix_standin = d.matrix_standin && c.matrix_standin;
  return o;
}

std::unique_ptr<Device> Device::create(const PhysicalDevice& physical, std::uint64_t local_heap_cap) {
  OpScope scope("create device");
  std::unique_ptr<Device> self(new Device());
  self->fn_ = *physical.functions;
  self->physical_ = physical.handle;
  self->family_ = physical.compute_family;
  self->count_heaps(local_heap_cap);

  const float priority = 1.0f;
  auto queue = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  queue.queueFamilyIndex = physical.compute_family;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  auto info = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  std::vector<const char*> extensions;
  if (physical.portability_subset) extensions.push_back("VK_KHR_portability_subset");
  if (physical.memory_budget) extensions.push_back("VK_EXT_memory_budget");
  self->memory_budget_ = physical.memory_budget;
  auto size_control = vk_struct<VkPhysicalDeviceSubgroupSizeControlFeaturesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT);
  if (physical.subgroup_size_control) {
    extensions.push_back("VK_EXT_subgroup_size_control");
    size_control.subgroupSizeControl = VK_TRUE;
    size_control.computeFullSubgroups = VK_TRUE;
    info.pNext = &size_control;
  }
  // Registers and spills of every pipeline, printed for VKATTN_PIPELINE_STATS=1 (a
  // developer's probe: docs/gpu.md).
  auto executables = vk_struct<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR);
  if (pipeline_stats_wanted() && physical.pipeline_stats) {  // a bad value refused on any device
    extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    executables.pipelineExecutableInfo = VK_TRUE;
    executables.pNext = const_cast<void*>(std::exchange(info.pNext, &executables));
    self->pipeline_stats_ = true;
  }
  // The matrix kernels: cooperative-matrix SPIR-V declares the Vulkan memory model and f16
  // components. Chained only for them, so that every other device is created as before.
  CoopmatFeatures coopmat{kCoopmatFeaturesType, nullptr, VK_TRUE, VK_FALSE};
  Coopmat2Features coopmat2{kCoopmat2FeaturesType, nullptr, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE, VK_FALSE};
  auto maintenance4 = vk_struct<VkPhysicalDeviceMaintenance4Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES);
  auto f16 = vk_struct<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
  auto memory_model =
      vk_struct<VkPhysicalDeviceVulkanMemoryModelFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
  if (physical.matrix_units) {
    extensions.push_back(kCoopmatExtension);
    f16.shaderFloat16 = VK_TRUE;
    memory_model.vulkanMemoryModel = VK_TRUE;
    memory_model.vulkanMemoryModelDeviceScope = VK_TRUE;
    coopmat.pNext = &f16;
    f16.pNext = &memory_model;
    memory_model.pNext = const_cast<void*>(std::exchange(info.pNext, &coopmat));
    if (physical.matrix_nv2) {
      extensions.push_back(kCoopmat2Extension);
      coopmat2.cooperativeMatrixFlexibleDimensions = VK_TRUE;
      coopmat2.cooperativeMatrixConversions = VK_TRUE;
      coopmat2.cooperativeMatrixPerElementOperations = VK_TRUE;
      maintenance4.maintenance4 = VK_TRUE;
      coopmat2.pNext = &maintenance4;
      maintenance4.pNext = const_cast<void*>(std::exchange(info.pNext, &coopmat2));
    }
  } else if (physical.float16) {  // the packed f16 kernels: f16 arithmetic alone
    f16.shaderFloat16 = VK_TRUE;
    f16.pNext = const_cast<void*>(std::exchange(info.pNext, &f16));
  }
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  VKATTN_VK_CREATE(self->device_, self->fn_.vkCreateDevice(physical.handle, &info, nullptr, &self->device_));
  try {
    self->fn_ = self->fn_.with_device(self->device_);
  } catch (...) {
    const auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(self->fn_.vkGetDeviceProcAddr(self->device_, "vkDestroyDevice"));
    if (destroy) destroy(self->device_, nullptr);
    self->device_ = VK_NULL_HANDLE;
    throw;
  }
  self->fn_.vkGetDeviceQueue(self->device_, self->family_, 0, &self->queue_);
  return self;
}

void Device::count_heaps(std::uint64_t local_heap_cap) {
  fn_.vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
  std::vector<HeapLedger::Heap> heaps;
  for (std::uint32_t i = 0; i < memory_.memoryHeapCount; ++i) {
    const VkMemoryHeap& h = memory_.memoryHeaps[i];
    const bool local = h.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
    heaps.push_back({"heap " + std::to_string(i) + (local ? " (device-local)" : " (host)"),
                     local && local_heap_cap ? std::min<std::uint64_t>(h.size, local_heap_cap) : h.size});
  }
  heaps_ = std::make_unique<HeapLedger>(std::move(heaps));
  // Every buffer is an allocation of its own: counted, so that the one past the driver's
  // limit is Error(out_of_memory) rather than undefined behaviour. (On a caller's device
  // its own allocations count too, which vkattn cannot see.)
  VkPhysicalDeviceProperties props{};
  fn_.vkGetPhysicalDeviceProperties(physical_, &props);
  heaps_->limit_allocations(props.limits.maxMemoryAllocationCount);
}

Device::~Device() {
  if (device_ == VK_NULL_HANDLE || !owned_) return;
  fn_.vkDeviceWaitIdle(device_);  // nothing useful to do with a failure while tearing down
  fn_.vkDestroyDevice(device_, nullptr);
}

HeapReservation Device::reserve(std::uint32_t heap, std::uint64_t bytes, const std::string& what) {
  if (memory_budget_) {
    // The driver's view covers every allocation of the process (other backends, other
    // libraries); it may lag behind allocations just made, which the ledger counts.
    auto budget =
        vk_struct<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
    auto props = vk_struct<VkPhysicalDeviceMemoryProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
    props.pNext = &budget;
    fn_.vkGetPhysicalDeviceMemoryProperties2(physical_, &props);
    const std::uint64_t used = budget.heapUsage[heap], limit = budget.heapBudget[heap];
    if (bytes > limit || used > limit - bytes) {
      throw heaps_->full(heap, what, bytes, used, limit, "the driver's budget for this process",
                         "VK_EXT_memory_budget heapBudget");
    }
  }
  return HeapReservation(*heaps_, heap, bytes, what);
}

void Device::check_alive() const {
  if (const char* call = lost_in_.load()) {
    throw Error(ErrorCode::device_lost,
                std::string("the device was lost earlier (") + call +
                    " reported VK_ERROR_DEVICE_LOST); every call on this backend fails: make a new backend",
                "", VK_ERROR_DEVICE_LOST, current_op());
  }
}

void Device::note(VkResult result, const char* call) {
  const char* none = nullptr;
  if (result == VK_ERROR_DEVICE_LOST) lost_in_.compare_exchange_strong(none, call);
}

void Device::submit(VkCommandBuffer cb, VkFence fence, const SemaphoreSync* sync) {
  check_alive();
  auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cb;
  auto timeline = vk_struct<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
  if (sync) {
    submit.waitSemaphoreCount = static_cast<std::uint32_t>(sync->wait.size());
    submit.pWaitSemaphores = sync->wait.data();
    submit.pWaitDstStageMask = sync->wait_stages.data();
    submit.signalSemaphoreCount = static_cast<std::uint32_t>(sync->signal.size());
    submit.pSignalSemaphores = sync->signal.data();
    bool any = false;
    for (auto v : sync->wait_values) any = any || v != 0;
    for (auto v : sync->signal_values) any = any || v != 0;
    if (any) {
      timeline.waitSemaphoreValueCount = submit.waitSemaphoreCount;
      timeline.pWaitSemaphoreValues = sync->wait_values.data();
      timeline.signalSemaphoreValueCount = submit.signalSemaphoreCount;
      timeline.pSignalSemaphoreValues = sync->signal_values.data();
      submit.pNext = &timeline;
    }
  }
  VkResult r = take_fault(FaultSite::queue_submit);
  if (r == VK_SUCCESS) {
    std::lock_guard lock(queue_mutex_);
    r = fn_.vkQueueSubmit(queue_, 1, &submit, fence);
  }
  note(r, "vkQueueSubmit");
  if (r < 0) throw_vk_error(r, "vkQueueSubmit", __FILE__, __LINE__);
}

bool Device::signalled(VkFence fence) {
  check_alive();
  const VkResult r = fn_.vkGetFenceStatus(device_, fence);
  note(r, "vkGetFenceStatus");
  if (r < 0) throw_vk_error(r, "vkGetFenceStatus", __FILE__, __LINE__);
  return r == VK_SUCCESS;
}

VkResult Device::wait(VkFence fence, std::uint64_t timeout_ns) {
  check_alive();
  VkResult r = fn_.vkWaitForFences(device_, 1, &fence, VK_TRUE, timeout_ns);
  if (const VkResult fault = take_fault(FaultSite::fence_wait); fault != VK_SUCCESS) r = fault;
  note(r, "vkWaitForFences");
  if (r < 0) throw_vk_error(r, "vkWaitForFences", __FILE__, __LINE__);
  return r == VK_TIMEOUT ? VK_TIMEOUT : VK_SUCCESS;
}

}  // namespace vkattn::detail
