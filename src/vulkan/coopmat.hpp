// VK_KHR_cooperative_matrix as the host uses it, and when the matrix kernels may use it.
// Debian 12's Vulkan headers (1.3.239) predate the extension (1.3.255), so vkattn declares
// what it needs under its own names with the registry's values; where the system's header
// has the extension, static_asserts check that both agree. vkattn's names are used either
// way, so the code is the same with old and new headers.
#pragma once

#include <vulkan/vulkan.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vkattn/types.hpp"

namespace vkattn::detail {

inline constexpr const char* kCoopmatExtension = "VK_KHR_cooperative_matrix";
inline constexpr VkStructureType kCoopmatFeaturesType = static_cast<VkStructureType>(1000506000);
inline constexpr VkStructureType kCoopmatShapeType = static_cast<VkStructureType>(1000506001);
inline constexpr VkStructureType kCoopmatPropertiesType = static_cast<VkStructureType>(1000506002);
// Whether the extension may be queried under a validation layer of |layer_version| (0:
// none): layers older than the extension (1.3.255; Debian 12 has 1.3.239) report its
// structures in a pNext chain as errors.
constexpr bool coopmat_query_allowed(std::uint32_t layer_version) {
  return layer_version == 0 || layer_version >= VK_MAKE_API_VERSION(0, 1, 3, 255);
}

// VK_NV_cooperative_matrix2 (attn_mt2.comp's kernel): its features and flexible dimensions,
// declared the same way (Debian 12's headers predate it too). Queried only under no
// validation layer or a 1.4 one (the extension came with 1.3.301's headers; trixie's layer
// is 1.4.309), and only on devices vkattn creates.
inline constexpr const char* kCoopmat2Extension = "VK_NV_cooperative_matrix2";
inline constexpr VkStructureType kCoopmat2FeaturesType = static_cast<VkStructureType>(1000593000);
inline constexpr VkStructureType kCoopmat2FlexibleType = static_cast<VkStructureType>(1000593001);
inline constexpr VkStructureType kCoopmat2PropertiesType = static_cast<VkStructureType>(1000593002);
constexpr bool coopmat2_query_allowed(std::uint32_t layer_version) {
  return layer_version == 0 || layer_version >= VK_MAKE_API_VERSION(0, 1, 4, 303);
}

// VkComponentTypeKHR; later extensions append values (bfloat16, float8).
enum class CoopmatComponent : std::int32_t {
  f16 = 0,
  f32 = 1,
  f64 = 2,
  s8 = 3,
  s16 = 4,
  s32 = 5,
  s64 = 6,
  u8 = 7,
  u16 = 8,
  u32 = 9,
  u64 = 10,
  bf16 = 1000141000,  // VK_KHR_shader_bfloat16
  e4m3 = 1000491002,  // VK_EXT_shader_float8 (VK_NV_cooperative_vector's value)
  e5m2 = 1000491003,
};
// VkScopeKHR.
enum class CoopmatScope : std::int32_t { device = 1, workgroup = 2, subgroup = 3, queue_family = 5 };

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR.
struct CoopmatFeatures {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
};
// VkPhysicalDeviceCooperativeMatrixPropertiesKHR.
struct CoopmatProperties {
  VkStructureType sType;
  void* pNext;
  VkShaderStageFlags cooperativeMatrixSupportedStages;
};
// VkCooperativeMatrixPropertiesKHR: one entry of the device's list.
struct CoopmatShape {
  VkStructureType sType;
  void* pNext;
  std::uint32_t MSize;
  std::uint32_t NSize;
  std::uint32_t KSize;
  CoopmatComponent AType;
  CoopmatComponent BType;
  CoopmatComponent CType;
  CoopmatComponent ResultType;
  VkBool32 saturatingAccumulation;
  CoopmatScope scope;
};
// PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR.
using CoopmatShapesFn = VkResult(VKAPI_PTR*)(VkPhysicalDevice, std::uint32_t*, CoopmatShape*);

// VkPhysicalDeviceCooperativeMatrix2FeaturesNV.
struct Coopmat2Features {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrixWorkgroupScope;
  VkBool32 cooperativeMatrixFlexibleDimensions;
  VkBool32 cooperativeMatrixReductions;
  VkBool32 cooperativeMatrixConversions;
  VkBool32 cooperativeMatrixPerElementOperations;
  VkBool32 cooperativeMatrixTensorAddressing;
  VkBool32 cooperativeMatrixBlockLoads;
};
// VkPhysicalDeviceCooperativeMatrix2PropertiesNV.
struct Coopmat2Properties {
  VkStructureType sType;
  void* pNext;
  std::uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
  std::uint32_t cooperativeMatrixFlexibleDimensionsMaxDimension;
  std::uint32_t cooperativeMatrixWorkgroupScopeReservedSharedMemory;
};
// VkCooperativeMatrixFlexibleDimensionsPropertiesNV: one entry of the device's list.
struct Coopmat2Flexible {
  VkStructureType sType;
  void* pNext;
  std::uint32_t MGranularity;
  std::uint32_t NGranularity;
  std::uint32_t KGranularity;
  CoopmatComponent AType;
  CoopmatComponent BType;
  CoopmatComponent CType;
  CoopmatComponent ResultType;
  VkBool32 saturatingAccumulation;
  CoopmatScope scope;
  std::uint32_t workgroupInvocations;
};
// PFN_vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV.
using Coopmat2FlexibleFn = VkResult(VKAPI_PTR*)(VkPhysicalDevice, std::uint32_t*, Coopmat2Flexible*);

static_assert(sizeof(void*) != 8 || sizeof(CoopmatShape) == 56, "VkCooperativeMatrixPropertiesKHR is 56 bytes on LP64");

#ifdef VK_KHR_cooperative_matrix
static_assert(kCoopmatFeaturesType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR);
static_assert(kCoopmatShapeType == VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR);
static_assert(kCoopmatPropertiesType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR);
static_assert(static_cast<int>(CoopmatComponent::f16) == VK_COMPONENT_TYPE_FLOAT16_KHR &&
              static_cast<int>(CoopmatComponent::f32) == VK_COMPONENT_TYPE_FLOAT32_KHR &&
              static_cast<int>(CoopmatComponent::f64) == VK_COMPONENT_TYPE_FLOAT64_KHR &&
              static_cast<int>(CoopmatComponent::s8) == VK_COMPONENT_TYPE_SINT8_KHR &&
              static_cast<int>(CoopmatComponent::s16) == VK_COMPONENT_TYPE_SINT16_KHR &&
              static_cast<int>(CoopmatComponent::s32) == VK_COMPONENT_TYPE_SINT32_KHR &&
              static_cast<int>(CoopmatComponent::s64) == VK_COMPONENT_TYPE_SINT64_KHR &&
              static_cast<int>(CoopmatComponent::u8) == VK_COMPONENT_TYPE_UINT8_KHR &&
              static_cast<int>(CoopmatComponent::u16) == VK_COMPONENT_TYPE_UINT16_KHR &&
              static_cast<int>(CoopmatComponent::u32) == VK_COMPONENT_TYPE_UINT32_KHR &&
              static_cast<int>(CoopmatComponent::u64) == VK_COMPONENT_TYPE_UINT64_KHR);
static_assert(static_cast<int>(CoopmatScope::device) == VK_SCOPE_DEVICE_KHR &&
              static_cast<int>(CoopmatScope::workgroup) == VK_SCOPE_WORKGROUP_KHR &&
              static_cast<int>(CoopmatScope::subgroup) == VK_SCOPE_SUBGROUP_KHR &&
              static_cast<int>(CoopmatScope::queue_family) == VK_SCOPE_QUEUE_FAMILY_KHR);
#define VKATTN_SAME_FIELD(ours, theirs, field) \
  static_assert(offsetof(ours, field) == offsetof(theirs, field) && sizeof(ours::field) == sizeof(theirs::field))
static_assert(sizeof(CoopmatFeatures) == sizeof(VkPhysicalDeviceCooperativeMatrixFeaturesKHR));
VKATTN_SAME_FIELD(CoopmatFeatures, VkPhysicalDeviceCooperativeMatrixFeaturesKHR, cooperativeMatrix);
VKATTN_SAME_FIELD(CoopmatFeatures, VkPhysicalDeviceCooperativeMatrixFeaturesKHR, cooperativeMatrixRobustBufferAccess);
static_assert(sizeof(CoopmatProperties) == sizeof(VkPhysicalDeviceCooperativeMatrixPropertiesKHR));
VKATTN_SAME_FIELD(CoopmatProperties, VkPhysicalDeviceCooperativeMatrixPropertiesKHR, cooperativeMatrixSupportedStages);
static_assert(sizeof(CoopmatShape) == sizeof(VkCooperativeMatrixPropertiesKHR));
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, MSize);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, NSize);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, KSize);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, AType);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, BType);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, CType);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, ResultType);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, saturatingAccumulation);
VKATTN_SAME_FIELD(CoopmatShape, VkCooperativeMatrixPropertiesKHR, scope);
#undef VKATTN_SAME_FIELD
#endif
#ifdef VK_NV_cooperative_matrix2
static_assert(kCoopmat2FeaturesType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV);
static_assert(kCoopmat2FlexibleType == VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV);
static_assert(kCoopmat2PropertiesType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV);
static_assert(sizeof(Coopmat2Features) == sizeof(VkPhysicalDeviceCooperativeMatrix2FeaturesNV));
static_assert(offsetof(Coopmat2Features, cooperativeMatrixBlockLoads) ==
              offsetof(VkPhysicalDeviceCooperativeMatrix2FeaturesNV, cooperativeMatrixBlockLoads));
static_assert(sizeof(Coopmat2Properties) == sizeof(VkPhysicalDeviceCooperativeMatrix2PropertiesNV));
static_assert(sizeof(Coopmat2Flexible) == sizeof(VkCooperativeMatrixFlexibleDimensionsPropertiesNV));
static_assert(offsetof(Coopmat2Flexible, workgroupInvocations) ==
              offsetof(VkCooperativeMatrixFlexibleDimensionsPropertiesNV, workgroupInvocations));
#endif

// Whether this build has the matrix kernels (a glslang that compiles them was found).
#ifdef VKATTN_HAVE_COOPMAT_SHADERS
inline constexpr bool kCoopmatKernelsBuilt = true;
#else
inline constexpr bool kCoopmatKernelsBuilt = false;
#endif
// And the kernel on NV cooperative matrices 2 (that glslang compiles those too).
#ifdef VKATTN_HAVE_COOPMAT2_SHADERS
inline constexpr bool kCoopmat2KernelsBuilt = true;
#else
inline constexpr bool kCoopmat2KernelsBuilt = false;
#endif

// What the matrix path's choice depends on, read from one device (probe_device): the
// extension, the other features the kernels need, and what tells the vendor's
// architectures apart. Plain values, so that the choice is a pure function of them.
struct CoopmatFacts {
  std::uint32_t vendor_id = 0;
  std::uint32_t driver_id = 0;  // VkDriverId; 0 when the device does not say (Vulkan 1.1)
  // NVIDIA: warps per SM (VK_NV_shader_sm_builtins): 32 on Turing, 48 or 64 after; 0: not reported.
  std::uint32_t nv_warps_per_sm = 0;
  // AMD, told apart as llama.cpp does: wavefronts per SIMD (VK_AMD_shader_core_properties:
  // 20 on RDNA1, 16 on RDNA4), accelerated mixed-sign 8-bit dot products (RDNA3 and
  // later), and the subgroup sizes (32 to 64 on RDNA, 64 alone on GCN).
  std::uint32_t amd_wavefronts_per_simd = 0;
  bool amd_mixed_dot8 = false;
  std::uint32_t subgroup_min_size = 0, subgroup_max_size = 0;

  // The caller's device (ExternalVulkan): what the kernels need that its create info did
  // not enable ("" for devices vkattn creates, which enable it all).
  std::string caller_lacks;
  bool listed = false;   // the device lists VK_KHR_cooperative_matrix
  bool queried = false;  // and vkattn asked (not under a validation layer older than the extension)
  bool feature = false;  // cooperativeMatrix
  bool compute = false;  // cooperativeMatrixSupportedStages has the compute stage
  std::vector<CoopmatShape> shapes;
  bool vulkan_1_2 = false;      // device and instance: the kernels are SPIR-V 1.5
  bool shader_float16 = false;  // shaderFloat16 (f16 components)
  // vulkanMemoryModel (cooperative-matrix modules use it) with vulkanMemoryModelDeviceScope
  // (then every module's device-scope atomics need it).
  bool memory_model = false;
  bool full_subgroups = false;  // subgroup size control with computeFullSubgroups
  // VK_NV_cooperative_matrix2, where listed and queried: the three features attn_mt2 uses
  // (flexible dimensions, conversions, per-element operations; and maintenance4, which
  // SPIR-V 1.6's LocalSizeId needs), the largest
  // flexible dimension, its flexible entries, and Vulkan 1.3 (SPIR-V 1.6).
  bool nv2_listed = false, nv2_queried = false, nv2_features = false, vulkan_1_3 = false;
  std::uint32_t nv2_max_dimension = 0;
  std::vector<Coopmat2Flexible> nv2_flexible;
};

// The kernels' tile side |s| serves: 16 for 16x16x16, 8 for 8x8x8 (a 16 x 16 tile of 2 x 2
// of them: mt_coopmat.glsl), f16 x f16 + f32 -> f32, per subgroup, not saturating; 0 for
// any other entry.
std::uint32_t kernel_tile(const CoopmatShape& s);
// The side the kernels take from |shapes|: 16 where listed, else 8, else 0.
std::uint32_t kernel_tile(const std::vector<CoopmatShape>& shapes);

// The device's list through |fn| (every entry's sType set, pNext null); empty when the
// call fails.
std::vector<CoopmatShape> coopmat_shapes(CoopmatShapesFn fn, VkPhysicalDevice device);

// Why attn_mt2 cannot run on the device (its facts; |built|: this build has it); "" when
// it can: an f16 x f16 + f32 -> f32 subgroup entry whose granularities divide 16, a
// largest flexible dimension of 128 or more, and the three features with maintenance4.
std::string coopmat2_gap(const CoopmatFacts& facts, bool built);

// The device's flexible entries through |fn| (as coopmat_shapes).
std::vector<Coopmat2Flexible> coopmat2_flexible(Coopmat2FlexibleFn fn, VkPhysicalDevice device);

// The decision for one device: the hardware path (units), or the stand-in, and why the
// hardware path is off (note; "" when on).
struct MatrixChoice {
  bool units = false;
  std::uint32_t tile = 0;  // with units: the cooperative matrices' side (kernel_tile)
  bool nv2 = false;        // with units: attn_mt2 runs where the plan allows (coopmat2_gap "")
  bool standin = false;
  std::string note;
};
// |knob| as DeviceOptions::matrix_units resolved it; |built|: this build has the kernels.
MatrixChoice choose_matrix(const CoopmatFacts& facts, MatrixUnits knob, bool built);

// DeviceOptions::matrix_units, else $VKATTN_MATRIX, else automatic; InvalidArgument naming
// either for a value outside the four.
MatrixUnits matrix_units_wanted(const DeviceOptions& options);

// What the create info of a caller's device (ExternalVulkan; null: nothing enabled) lacks
// of what the matrix kernels need, as CoopmatFacts::caller_lacks says it; "" when nothing
// (external.cpp).
std::string matrix_features_lacking(const VkDeviceCreateInfo* info);

// The public form of one entry.
MatrixShape public_shape(const CoopmatShape& s);

}  // namespace vkattn::detail
