#include "vulkan/coopmat.hpp"

#include <algorithm>

#include "common/env.hpp"
#include "common/op_scope.hpp"
#include "vkattn/error.hpp"
#include "vulkan/device.hpp"

namespace vkattn::detail {

namespace {

constexpr std::uint32_t kVendorNvidia = 0x10DE;
constexpr std::uint32_t kVendorAmd = 0x1002;
constexpr std::uint32_t kVendorIntel = 0x8086;
constexpr std::uint32_t kVendorArm = 0x13B5;
constexpr std::uint32_t kVendorQualcomm = 0x5143;
constexpr std::uint32_t kVendorApple = 0x106B;
// VkDriverId values (1.2): AMD's own drivers, the Windows one and AMDVLK.
constexpr std::uint32_t kDriverAmdProprietary = 1;
constexpr std::uint32_t kDriverAmdOpenSource = 2;

// RDNA3 or later, told apart as llama.cpp's get_device_architecture does: RDNA runs
// subgroups of 32 or 64 (GCN only 64), RDNA1 has 20 wavefronts per SIMD and RDNA4 16, and
// RDNA3 is the first with accelerated mixed-sign 8-bit dot products.
bool amd_rdna3_or_later(const CoopmatFacts& f) {
  if (f.subgroup_min_size != 32 || f.subgroup_max_size != 64 || f.amd_wavefronts_per_simd == 0) return false;
  if (f.amd_wavefronts_per_simd == 16) return true;
  return f.amd_wavefronts_per_simd != 20 && f.amd_mixed_dot8;
}

// Why the device cannot run the matrix kernels on its units; "" when it can.
std::string hardware_gap(const CoopmatFacts& f) {
  if (!f.listed) return "the device does not list VK_KHR_cooperative_matrix";
  // Before the query's facts: on the caller's device vkattn queries only what it enabled.
  if (!f.caller_lacks.empty()) {
    return "the caller's device was created without " + f.caller_lacks +
           " enabled (ExternalVulkan::device_create_info; vulkan_requirements() lists them)";
  }
  if (!f.queried) {
    return "VK_KHR_cooperative_matrix not queried: the validation layer is older than the extension (1.3.255) and would "
           "report its structures as errors";
  }
  if (!f.feature) return "VK_KHR_cooperative_matrix is listed without its cooperativeMatrix feature";
  if (!f.compute) return "cooperative matrices are not supported in compute shaders";
  if (f.shapes.empty()) return "the device lists no cooperative-matrix shapes (or the loader does not pass the query on)";
  if (kernel_tile(f.shapes) == 0) {
    return "none of the device's " + std::to_string(f.shapes.size()) +
           " cooperative-matrix shapes is 16x16x16 or 8x8x8 f16 x f16 + f32 -> f32 per subgroup";
  }
  if (!f.vulkan_1_2) return "the matrix kernels need Vulkan 1.2 (device and loader)";
  if (!f.shader_float16) return "the device lacks shaderFloat16";
  if (!f.memory_model) return "the device lacks vulkanMemoryModel with vulkanMemoryModelDeviceScope";
  if (!f.full_subgroups) return "the device cannot require full subgroups (VK_EXT_subgroup_size_control)";
  return "";
}

// The allowlist (automatic): whether the vendor's units are known to run the kernels well;
// "" when they are. Some drivers list the extension on GPUs without matrix units behind it
// (llama.cpp #10597: Intel's A770 on Mesa, AMD's drivers on GPUs before RDNA3).
std::string vendor_gap(const CoopmatFacts& f) {
  switch (f.vendor_id) {
    case kVendorNvidia:
      if (f.nv_warps_per_sm == 0) {
        return "an NVIDIA GPU whose architecture the driver does not tell (VK_NV_shader_sm_builtins); MatrixUnits::on "
               "takes it";
      }
      if (f.nv_warps_per_sm == 32) {
        return "NVIDIA Turing (32 warps per SM): its shader compiler has miscompiled cooperative-matrix attention (llama.cpp "
               "PR 19075)";
      }
      // Ampere and later pass the hardware's rules, but the one measured (an H200,
      // docs/gpu.md) ran the matrix kernel slower than what f16_products takes without it.
      return "NVIDIA: on the H200 measured, the matrix kernel ran slower than the packed f16 tiled kernel (7.5 against "
             "12.9 TFLOP/s at 4kx4k causal) and absorbed MLA slower than the exact group kernel (821 against 530 us at "
             "16k keys)";
    case kVendorAmd:
      if ((f.driver_id == kDriverAmdProprietary || f.driver_id == kDriverAmdOpenSource) && !amd_rdna3_or_later(f)) {
        return "AMD's drivers list VK_KHR_cooperative_matrix on GPUs without matrix units; RDNA3 and later are on the "
               "allowlist";
      }
      return "";
    case kVendorIntel:
      return "Intel is not on the allowlist (Alchemist lists the extension but ran matrix code slowly in llama.cpp)";
    case kVendorArm: return "Arm is not on the allowlist";
    case kVendorQualcomm: return "Qualcomm is not on the allowlist";
    case kVendorApple: return "Apple is not on the allowlist";
    default: return "vendor " + hex_string(f.vendor_id) + " is not on the allowlist (AMD RDNA3 and later)";
  }
}

const char* component_name(CoopmatComponent c) {
  switch (c) {
    case CoopmatComponent::f16: return "f16";
    case CoopmatComponent::f32: return "f32";
    case CoopmatComponent::f64: return "f64";
    case CoopmatComponent::s8: return "s8";
    case CoopmatComponent::s16: return "s16";
    case CoopmatComponent::s32: return "s32";
    case CoopmatComponent::s64: return "s64";
    case CoopmatComponent::u8: return "u8";
    case CoopmatComponent::u16: return "u16";
    case CoopmatComponent::u32: return "u32";
    case CoopmatComponent::u64: return "u64";
    case CoopmatComponent::bf16: return "bf16";
    case CoopmatComponent::e4m3: return "e4m3";
    case CoopmatComponent::e5m2: return "e5m2";
  }
  return nullptr;
}

std::string component_string(CoopmatComponent c) {
  const char* name = component_name(c);
  return name ? name : "type " + std::to_string(static_cast<std::int32_t>(c));
}

std::string scope_string(CoopmatScope s) {
  switch (s) {
    case CoopmatScope::device: return "device";
    case CoopmatScope::workgroup: return "workgroup";
    case CoopmatScope::subgroup: return "subgroup";
    case CoopmatScope::queue_family: return "queue family";
  }
  return "scope " + std::to_string(static_cast<std::int32_t>(s));
}

}  // namespace

std::uint32_t kernel_tile(const CoopmatShape& s) {
  const bool types = s.AType == CoopmatComponent::f16 && s.BType == CoopmatComponent::f16 && s.CType == CoopmatComponent::f32 &&
                     s.ResultType == CoopmatComponent::f32 && s.scope == CoopmatScope::subgroup && !s.saturatingAccumulation;
  const bool square = s.MSize == s.NSize && s.NSize == s.KSize;
  return types && square && (s.MSize == 16 || s.MSize == 8) ? s.MSize : 0;
}

std::uint32_t kernel_tile(const std::vector<CoopmatShape>& shapes) {
  std::uint32_t best = 0;
  for (const CoopmatShape& s : shapes) best = std::max(best, kernel_tile(s));
  return best;
}

std::vector<CoopmatShape> coopmat_shapes(CoopmatShapesFn fn, VkPhysicalDevice device) {
  std::uint32_t n = 0;
  if (fn(device, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<CoopmatShape> shapes(n, CoopmatShape{kCoopmatShapeType, nullptr, 0, 0, 0, {}, {}, {}, {}, VK_FALSE, {}});
  // VK_INCOMPLETE (the list grew in between) still fills the first n.
  if (fn(device, &n, shapes.data()) < 0) return {};
  shapes.resize(std::min<std::size_t>(n, shapes.size()));
  return shapes;
}

std::string coopmat2_gap(const CoopmatFacts& f, bool built) {
  if (!built) return "this build has no kernel on NV cooperative matrices 2 (its glslang cannot compile them)";
  if (!f.nv2_listed) return "the device does not list VK_NV_cooperative_matrix2";
  if (!f.nv2_queried) return "VK_NV_cooperative_matrix2 not queried (a validation layer older than 1.4, or a caller's device)";
  if (!f.vulkan_1_3) return "NV cooperative matrices 2 need Vulkan 1.3 (device and loader)";
  if (!f.nv2_features) {
    return "VK_NV_cooperative_matrix2 lacks flexible dimensions, conversions or per-element operations (or the device "
           "lacks maintenance4)";
  }
  if (f.nv2_max_dimension < 128) return "the device's flexible dimensions stop below 128";
  const bool entry = std::any_of(f.nv2_flexible.begin(), f.nv2_flexible.end(), [](const Coopmat2Flexible& e) {
    const auto divides16 = [](std::uint32_t g) { return g != 0 && 16 % g == 0; };
    return e.AType == CoopmatComponent::f16 && e.BType == CoopmatComponent::f16 && e.CType == CoopmatComponent::f32 &&
           e.ResultType == CoopmatComponent::f32 && e.scope == CoopmatScope::subgroup && !e.saturatingAccumulation &&
           divides16(e.MGranularity) && divides16(e.NGranularity) && divides16(e.KGranularity);
  });
  if (!entry) return "no flexible f16 x f16 + f32 -> f32 subgroup entry with granularities dividing 16";
  return "";
}

std::vector<Coopmat2Flexible> coopmat2_flexible(Coopmat2FlexibleFn fn, VkPhysicalDevice device) {
  std::uint32_t n = 0;
  if (fn(device, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<Coopmat2Flexible> out(n,
                                    Coopmat2Flexible{kCoopmat2FlexibleType, nullptr, 0, 0, 0, {}, {}, {}, {}, VK_FALSE, {}, 0});
  if (fn(device, &n, out.data()) < 0) return {};
  out.resize(std::min<std::size_t>(n, out.size()));
  return out;
}

MatrixChoice choose_matrix(const CoopmatFacts& facts, MatrixUnits knob, bool built) {
  MatrixChoice c;
  if (knob == MatrixUnits::standin) {
    c.standin = true;
    c.note = "the matrix kernels run as the plain-GLSL stand-in (DeviceOptions::matrix_units or VKATTN_MATRIX = standin)";
    return c;
  }
  if (knob == MatrixUnits::off) {
    c.note = "as asked (DeviceOptions::matrix_units or VKATTN_MATRIX = off)";
    return c;
  }
  if (!built) {
    c.note = "this build of vkattn has no matrix kernels (its glslang could not compile GL_KHR_cooperative_matrix)";
    return c;
  }
  c.note = hardware_gap(facts);
  if (c.note.empty() && knob == MatrixUnits::automatic) {
    c.note = vendor_gap(facts);
    if (!c.note.empty()) c.note += "; VKATTN_MATRIX=on tries it";
  }
  c.units = c.note.empty();
  if (c.units) {
    c.tile = kernel_tile(facts.shapes);
    c.nv2 = coopmat2_gap(facts, kCoopmat2KernelsBuilt).empty();
  }
  return c;
}

MatrixUnits matrix_units_wanted(const DeviceOptions& options) {
  // check_device_options has refused values outside the enum at every entry point.
  if (options.matrix_units) return *options.matrix_units;
  using enum MatrixUnits;
  return env_choice(current_op(), "VKATTN_MATRIX", automatic,
                    {{"automatic", automatic}, {"auto", automatic}, {"off", off}, {"on", on}, {"standin", standin}},
                    "automatic (or auto), off, on or standin");
}

MatrixShape public_shape(const CoopmatShape& s) {
  return MatrixShape{.m = s.MSize,
                     .n = s.NSize,
                     .k = s.KSize,
                     .a = component_string(s.AType),
                     .b = component_string(s.BType),
                     .c = component_string(s.CType),
                     .result = component_string(s.ResultType),
                     .scope = scope_string(s.scope),
                     .saturating = s.saturatingAccumulation != VK_FALSE};
}

}  // namespace vkattn::detail
