// Plain value types shared by both backends. No Vulkan types appear in public headers.
#pragma once

#include "vkattn/require_cxx20.hpp"  // C++17 code can use the C API, vkattn/vkattn.h

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vkattn/export.h"

namespace vkattn {

// Row-major, innermost dimension last; every dimension >= 1.
using Shape = std::vector<std::size_t>;

enum class DType {
  f32,   // 4 bytes
  f16,   // IEEE half, stored two per 32-bit word (low half first): no 16-bit storage needed
  i32,   // positions, sequence ids
  q8_0,  // K and V only: blocks of 32 along the last dimension (a multiple of 32), one f16
         // scale d = max|x| / 127 each, codes round(x / d) in int8 (ggml's q8_0):
         // 1.0625 bytes per element. Layout: docs/kv-cache.md, Quantized caches
  q4_0,  // K and V only: blocks of 32, one f16 scale d = -x_max / 8 (x_max the value of
         // largest |x|), 4-bit codes of x / d + 8 (ggml's q4_0): 0.5625 bytes per element
};
VKATTN_API const char* to_string(DType dtype);

enum class BackendKind { cpu, vulkan };
VKATTN_API const char* to_string(BackendKind kind);

enum class RopeLayout {
  interleaved,  // pairs (x[2i], x[2i+1]): RoFormer, Meta's original Llama, GPT-J
  half,         // pairs (x[i], x[i + d/2]): rotate_half in GPT-NeoX and Hugging Face Llama
};

// How the frequencies theta_i = base^(-2i/d) are rescaled for context extension, as the
// Hugging Face transformers and llama.cpp families define them (d = rotary_dim).
enum class RopeScaling {
  none,         // theta_i as is
  linear,       // position interpolation: theta_i / factor (Chen et al. 2023; "linear")
  ntk,          // NTK-aware: base * factor^(d / (d - 2)) (static; llama.cpp's "ntk" base change)
  dynamic_ntk,  // "dynamic": base * (factor * L / original_context - (factor - 1))^(d / (d - 2))
                // with L = max(sequence_length, original_context): unscaled until L passes
                // the original context
  yarn,         // YaRN: interpolated and extrapolated frequencies mixed by a linear ramp
                // between the beta_fast and beta_slow bounds, plus an attention factor
  llama3,       // Llama 3.1: wavelengths beyond original_context / low_freq_factor are
                // divided by factor, below original_context / high_freq_factor kept, smooth between
  factors,      // theta_i / freq_factors[i]: a per-frequency table (LongRoPE / Phi-3
                // short and long factors, llama.cpp's rope_freqs tensor)
};

struct YarnParams {
  double beta_fast = 32.0;      // rotations bounding the extrapolated (high-frequency) end; default 32
  double beta_slow = 1.0;       // rotations bounding the interpolated end; default 1; < beta_fast
  double mscale = 0.0;          // DeepSeek-V2/V3 style: with mscale_all_dim, attention factor =
  double mscale_all_dim = 0.0;  //   m(factor, mscale) / m(factor, mscale_all_dim); 0 = unused
  bool truncate = true;         // floor/ceil the ramp bounds to whole dims (HF default true)
};

struct Llama3Params {
  double low_freq_factor = 1.0;   // Llama 3.1 uses 1
  double high_freq_factor = 4.0;  // Llama 3.1 uses 4; >= low_freq_factor (Llama 4 Scout: equal,
                                  // which leaves no smooth band)
};

// M-RoPE (multimodal RoPE: Qwen2-VL and later): each token has three positions, temporal,
// height and width (t, h, w), and each rotary pair i rotates by one of them at the plain
// angle pos * theta_i. Text tokens have t = h = w and get plain RoPE exactly.
enum class MRopeLayout {
  contiguous,   // pairs [0, s_t) by t, the next s_h by h, the last s_w by w (Qwen2-VL,
                // Qwen2.5-VL, GLM-4.5V; ggml's GGML_ROPE_TYPE_MROPE)
  interleaved,  // pair i by h when i % 3 == 1 and i < 3 s_h, by w when i % 3 == 2 and
                // i < 3 s_w, else by t (Qwen3-VL, Qwen3.5; Hugging Face's
                // apply_interleaved_mrope, ggml's GGML_ROPE_TYPE_IMROPE)
};
struct MRope {
  std::array<std::uint32_t, 3> sections{};  // rotary pairs per position (t, h, w), as
                                            // config.json's mrope_section; they add up
                                            // to rotary_dim / 2
  MRopeLayout layout = MRopeLayout::contiguous;
};

struct RopeConfig {
  RopeLayout layout = RopeLayout::half;  // default: Hugging Face layout
  std::size_t rotary_dim = 0;            // dims rotated, even; default 0 = head_dim - rotary_offset
  std::size_t rotary_offset = 0;         // the first dim rotated, even: dims [rotary_offset,
                                         // rotary_offset + rotary_dim) rotate, the rest pass
                                         // through (DeepSeek's MLA keys: 512 of 576)
  double base = 10000.0;                 // theta_i = base^(-2i/rotary_dim); finite, > 0
                                         // (Llama 2: 1e4; Llama 3: 5e5; Qwen2: 1e6)
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;                 // linear, ntk, dynamic_ntk, yarn, llama3: context extension
                                       // factor (Llama 3.1: 8; Qwen2.5 YaRN: 4); finite, > 0
  std::size_t original_context = 0;    // dynamic_ntk, yarn, llama3: the trained context length
                                       // (original_max_position_embeddings); >= 1 for those
  std::size_t sequence_length = 0;     // dynamic_ntk: current length; 0 = 1 + largest position
  YarnParams yarn{};                   // yarn only
  Llama3Params llama3{};               // llama3 only
  std::vector<double> freq_factors{};  // factors: rotary_dim / 2 values, each finite, > 0
  // Multiplies the rotated dims (cos and sin), as YaRN's mscale does. Default: yarn
  // 0.1 * ln(factor) + 1 (1 when factor <= 1), else 1. Phi-3 LongRoPE uses
  // sqrt(1 + ln(s) / ln(original_context)). Finite, > 0.
  std::optional<double> attention_factor{};
  // M-RoPE: rope then takes three positions per token, [n_tokens, 3] row-major (t, h, w).
  // Not with KvRope::on_read (rotate keys before kv_append: KvRope::stored).
  std::optional<MRope> mrope{};
};

// The frequencies a RopeConfig resolves to, for a tensor with |head_dim| and a call whose
// largest position is |max_position| (only dynamic_ntk depends on it).
struct RopeFrequencies {
  std::vector<double> theta;  // rotary_dim / 2 angles per token, radians
  double attention_factor = 1.0;
};
VKATTN_API RopeFrequencies rope_frequencies(const RopeConfig& config, std::size_t head_dim, std::int32_t max_position = 0);

// Attention options shared by the three stages (scores, softmax, weighted sum).
// Per query token t, head h, key j, with kvh(h) = h / (n_heads / n_kv_heads):
//   s = scale * <q[t,h], k[j,kvh(h)]>;  s = softcap * tanh(s / softcap) when set;
//   s -= alibi_slope[h] * |pos_t - pos_j| when ALiBi is on;  s += mask[t, j] when given;
//   s = -inf for keys t cannot see (other sequence, future when causal, outside window,
//   another chunk). With a query temperature, scale is scale * t(pos_t).
// The ALiBi bias is symmetric, as in llama.cpp and in bidirectional ALiBi encoders: with
// causal masking it is the usual slope * (pos_j - pos_t); without it, future keys are
// penalised by their distance too.
// Which kernels CommandList::attention runs (the three-stage ops ignore it).
enum class AttentionPath {
  automatic,     // fused, except with the CPU-shaped kernels (lavapipe's, or VKATTN_KERNELS=cpu),
                 // where the three stages are faster, when their scores fit one storage buffer range
  fused,         // the fused kernel
  three_stages,  // attn_scores, attn_softmax (in place) and attn_weighted_sum on a temporary
};
// "automatic", "fused", "three_stages"; "unknown" for another value (0.13).
VKATTN_API const char* to_string(AttentionPath path);

// How precisely CommandList::attention computes its products (the three-stage ops take
// only f32). docs/attention.md states each mode's tolerance against exact arithmetic.
enum class AttentionPrecision {
  f32,           // every product and sum in f32 (~1e-5 relative): the default
  f16_products,  // Q, K, V and the probabilities rounded to f16 (to nearest even), their
                 // products summed in f32, the softmax in f32: what matrix units compute.
                 // Without a matrix path: packed f16 FMAs in chains of at most 8 on devices
                 // with shaderFloat16 (VKATTN_PACKED_F16), else the f32 kernels (any kernel
                 // may be more precise than asked); the CPU backend rounds Q, K and V, then
                 // is exact
};
// "f32", "f16_products"; "unknown" for another value (0.13).
VKATTN_API const char* to_string(AttentionPrecision precision);

// Where soft-capping sits relative to the scale. The two agree when scale = 1 (Gemma 2).
enum class SoftcapOrder {
  scale_then_cap,  // s = softcap * tanh(scale * qk / softcap): ggml's flash attention. Default.
  cap_then_scale,  // s = scale * softcap * tanh(qk / softcap): llama.cpp's graph without flash
                   // attention (caps the unscaled qk, then scales)
};

// Which way AttentionConfig::window looks.
enum class WindowType {
  trailing,   // keys with pos_t - pos_j < window (Mistral, Gemma 2/3, gpt-oss)
  symmetric,  // keys with |pos_t - pos_j| <= window / 2, both ways; causal = false (bidirectional
              // encoders: ModernBERT, EmbeddingGemma; llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC)
};

// A per-position query temperature (Llama 4's NoPE layers, Ministral 3, Mistral Small 4):
// each query row's scores are multiplied by
//   t(pos_t) = 1 + scale * ln(1 + floor((pos_t + offset) / floor_scale))
// before soft-capping, as if q were multiplied by t (llama.cpp: f_attn_temp_scale,
// n_attn_temp_floor_scale, f_attn_temp_offset).
struct QueryTemperature {
  std::uint32_t floor_scale = 8192;  // >= 1 (Llama 4: floor_scale 8192; Ministral 3:
                                     // original_max_position_embeddings 16384)
  double scale = 0.1;                // finite (Llama 4: attn_scale; Mistral: llama_4_scaling_beta)
  std::uint32_t offset = 1;          // < 2^31 (Llama 4: 1, as Hugging Face's positions + 1;
                                     // Ministral 3 / Mistral Small 4: 0)
};

struct AttentionConfig {
  std::optional<double> scale{};                  // default 1/sqrt(head_dim); finite
  bool causal = true;                             // keys with pos_j <= pos_t only
  std::optional<std::uint32_t> window{};          // keys with pos_t - pos_j < window (Mistral); >= 1
  WindowType window_type = WindowType::trailing;  // with window only
  // Chunked local attention (Llama 4: 8192 on 3 layers of 4): keys with
  // floor(pos_j / chunk) == floor(pos_t / chunk) only, besides causal and window; >= 1
  std::optional<std::uint32_t> chunk{};
  std::optional<QueryTemperature> query_temperature{};        // none: t = 1
  std::optional<double> softcap{};                            // Gemma 2 logit soft-capping (50); finite, > 0
  SoftcapOrder softcap_order = SoftcapOrder::scale_then_cap;  // with softcap only
  bool alibi = false;                                         // ALiBi with the standard geometric slopes (BLOOM, MPT)
  std::vector<float> alibi_slopes{};                          // per head, replaces the standard slopes (implies ALiBi)
  std::vector<float> sinks{};                                 // per head sink logit in the softmax denominator
                                                              // only (gpt-oss); empty = none. Read by
                                                              // attn_softmax and attention; attn_scores
                                                              // refuses them
  AttentionPath path = AttentionPath::automatic;              // CommandList::attention only
  AttentionPrecision precision = AttentionPrecision::f32;     // CommandList::attention only; the
                                                              // three-stage ops refuse f16_products
  // CommandList::attention only (0.7): a promise that each query token's mask row leaves at
  // most this many keys (values other than -inf), as DeepSeek V3.2's and GLM-5's top-k
  // selection does (2048), so that kernels may read only those keys: the group decode
  // kernel does (AttentionRun::sparse says when). A row that leaves more is read whole, as
  // without the promise: nothing is cut. The result changes only by rounding (and the
  // dropped keys' K and V are not read). 0 (default): no promise. With a mask only; at most
  // n_keys. docs/attention.md: Sparse masks.
  std::uint32_t mask_keys = 0;
};

// Positions and sequence ids of the query tokens and of the keys, each in [0, 2^31).
// Ops copy them when they are recorded (as rope() copies its positions), so the arrays
// need not outlive the call; but they are views, and a view of a temporary vector
// (AttentionTokens t{.q_positions = std::vector<int32_t>{0}};) dangles once its statement
// ends: build them inside the call, or over named arrays. Over a KV cache the cache knows
// its keys: k_positions and k_seq_ids stay empty there.
struct AttentionTokens {
  std::span<const std::int32_t> q_positions{};  // n_tokens; absolute positions, also with
                                                // KvRope::on_read (the cache converts them)
  std::span<const std::int32_t> k_positions{};  // n_keys, or empty: keys at 0..n_keys-1
  std::span<const std::int32_t> q_seq_ids{};    // n_tokens, or empty: all in sequence 0
  std::span<const std::int32_t> k_seq_ids{};    // n_keys, or empty: all in sequence 0
};

// The standard ALiBi slopes for |n_heads| heads (Press et al. 2022; for a head count that
// is not a power of two, BLOOM's interleaving of the next power's slopes). n_heads at most
// 65536, else InvalidArgument.
VKATTN_API std::vector<float> alibi_slopes(std::size_t n_heads);

// Largest head_dim RoPE accepts (its cos/sin table lives in shared memory).
inline constexpr std::size_t kMaxHeadDim = 2048;
// Largest head_dim attention accepts (a query tile and a key tile share 16 KiB).
inline constexpr std::size_t kMaxAttentionHeadDim = 576;
// Widest key list CommandList::attention takes as its mask (0.8: an i32 mask
// [n_tokens, width] names the keys each token may see): a list is sorted in 16 KiB of
// shared memory, the least a device has.
inline constexpr std::size_t kMaxKeyList = 4096;

// The device limits vkattn depends on, read once per device. Options may lower them (see
// DeviceOptions::cap_limits) so that tests can run at the Vulkan spec minimums.
struct DeviceLimits {
  std::uint32_t subgroup_size = 0;                                        // lanes; 0 when the device reports none
  bool subgroup_arithmetic = false;                                       // subgroupAdd/Max/... in compute shaders
  bool subgroup_shuffle = false;                                          // subgroupShuffle* in compute shaders
  bool subgroup_size_control = false;                                     // a compute pipeline can require a subgroup size
                                                                          // and full subgroups (VK_EXT_subgroup_size_control)
  std::uint32_t subgroup_min_size = 0;                                    // sizes a pipeline may require (size control);
  std::uint32_t subgroup_max_size = 0;                                    //   both subgroup_size without it
  bool subgroup_vote = false;                                             // subgroupAny/All in compute shaders
  std::uint32_t max_shared_memory = 16384;                                // bytes per workgroup; spec minimum 16 KiB
  std::uint32_t max_workgroup_invocations = 128;                          // spec minimum 128; Backend::limits():
                                                                          // at most max_workgroup_size[0] too
                                                                          // (every kernel is one-dimensional), and
                                                                          // maxComputeWorkgroupSubgroups subgroups
                                                                          // of the size a kernel requires
  std::array<std::uint32_t, 3> max_workgroup_size{128, 128, 64};          // spec minimum
  std::array<std::uint32_t, 3> max_workgroup_count{65535, 65535, 65535};  // spec minimum
  std::uint64_t max_storage_buffer_range = 134217728;                     // bytes; spec minimum 128 MiB
  // Storage-buffer bindings one kernel may use (maxPerStageDescriptorStorageBuffers); spec
  // minimum 4. Inputs read through texel views do not count against it.
  std::uint32_t max_storage_buffers = 4;
  std::uint64_t storage_offset_alignment = 256;  // minStorageBufferOffsetAlignment
  // 16-byte texels (R32G32B32A32_UINT) a uniform texel buffer may hold; spec minimum 65536.
  // Kernels read big inputs through texel buffers when the tensor fits (on CPU devices a
  // texel fetch is a vector gather, a storage-buffer load a per-lane loop); 0 turns that off.
  std::uint64_t max_texel_buffer_elements = 65536;
  // Largest device-local heap (the CPU backend: physical memory). Allocations are
  // counted against each heap; one that would not fit is Error(out_of_memory). A cap
  // lowers every device-local heap to it (0 in a cap: no change).
  std::uint64_t device_local_bytes = 0;
  bool storage_16bit = false;        // storageBuffer16BitAccess
  bool shader_float16 = false;       // shaderFloat16 (fp16 arithmetic)
  bool timestamps = false;           // compute-queue timestamps
  double timestamp_period_ns = 0.0;  // ns per timestamp tick
  bool unified_memory = false;       // device-local memory is host-visible
  // Compute units (NVIDIA SMs, AMD CUs, Arm shader cores) when the driver says
  // (VK_NV_shader_sm_builtins, VK_AMD_shader_core_properties, VK_ARM_shader_core_builtins);
  // 0 when it does not. Decode kernels split keys to give each unit several workgroups.
  std::uint32_t compute_units = 0;
  // Matrix kernels run on the device's matrix units (VK_KHR_cooperative_matrix, 16x16x16
  // f16 x f16 -> f32 per subgroup): the device can, this build has them, and
  // DeviceOptions::matrix_units lets them (DeviceInfo::matrix_note says why not).
  bool matrix_units = false;
  // Matrix kernels run as plain GLSL instead (DeviceOptions::matrix_units = standin).
  bool matrix_standin = false;
};

// The Vulkan 1.1 minimums for every limit above (features off).
VKATTN_API DeviceLimits spec_minimum_limits();

// Which family of kernels a Vulkan backend records (docs/kernel-shapes.md). The two
// compute the same results; they differ in how work maps onto the device.
enum class KernelShape {
  automatic,  // cpu on CPU devices (llvmpipe), gpu elsewhere
  cpu,        // a lane per key, inputs through texel views: fast on CPU devices
  gpu,        // decode with a group of lanes per key row (coalesced), keys split to fill
              // the device's compute units, inputs through storage buffers; needs subgroup
              // shuffles and size control, else the cpu shape's kernels run
};
VKATTN_API const char* to_string(KernelShape shape);

// Whether attention's matrix kernels use the device's matrix units (tensor cores), through
// VK_KHR_cooperative_matrix (DeviceOptions::matrix_units; docs/devices.md).
enum class MatrixUnits {
  automatic,  // where the device lists the 16x16x16 f16 x f16 -> f32 subgroup shape with
              // what the kernels need, and is on the allowlist (AMD RDNA3 and later; NVIDIA
              // is off while the one measured ran them slower, docs/devices.md): some
              // drivers list the extension on GPUs without the units
  off,        // never
  on,         // wherever the device lists the shape and what the kernels need, any vendor
  standin,    // the matrix kernels in plain GLSL on any device, units or not (tests: this
              // is how they run on lavapipe)
};
VKATTN_API const char* to_string(MatrixUnits units);

// One entry of a device's VK_KHR_cooperative_matrix list: result (M x N) = A (M x K) x
// B (K x N) + C (M x N) within one scope.
struct MatrixShape {
  std::uint32_t m = 0, n = 0, k = 0;
  // Component types: "f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32",
  // "u64", "bf16", "e4m3", "e5m2", or "type <value>" for one vkattn does not know.
  std::string a, b, c, result;
  std::string scope;        // "subgroup", "workgroup", "device", "queue family" or "scope <value>"
  bool saturating = false;  // saturatingAccumulation (integer types)
};

// How much a backend says about itself (DeviceOptions::log).
enum class LogLevel {
  off,      // as a threshold: nothing
  error,    // validation-layer errors
  warning,  // validation-layer warnings; a pipeline cache file that cannot be read, is
            // invalid or cannot be written; a GPU rejected in favour of another device
  info,     // each pipeline build with its time (5-25 s each on CPU devices), the device
            // chosen, how device memory is accounted
};
VKATTN_API const char* to_string(LogLevel level);

// Receives each message at or above DeviceOptions::log_level, on the thread whose call
// caused it: with several threads on one backend, several at once, so it must be
// thread-safe. It must not throw (an exception is dropped) nor call the backend, nor wait
// for a thread that does (it may run while vkattn holds a lock: a validation message during
// a submit). It is kept, and called, until the last object made from the backend goes
// (tensors, caches, lists outlive the Backend): what it refers to must live as long.
using LogCallback = std::function<void(LogLevel level, std::string_view message)>;

struct DeviceOptions {
  // Device index or case-insensitive name substring; default: $VKATTN_DEVICE, else the
  // best device by type (discrete > integrated > virtual > CPU).
  std::optional<std::string> device{};
  // Khronos validation layer plus a debug messenger recording every warning and error;
  // default: $VKATTN_VALIDATION == "1" for a backend, off for list_devices().
  std::optional<bool> validation{};
  // Lowers the limits the library plans with (element-wise minimum, features ANDed).
  // $VKATTN_CAP_LIMITS=spec_minimum lowers them further to spec_minimum_limits() on every
  // Vulkan backend, to try an application on the weakest device Vulkan allows (except
  // max_storage_buffers, 8 there rather than 4: docs/devices.md says why).
  std::optional<DeviceLimits> cap_limits{};
  // Keep tensors in device-local memory behind staging copies even on unified-memory
  // devices, so the staging path can be exercised anywhere. Default false.
  bool force_staging = false;
  // Directory of the VkPipelineCache files (one per device UUID and driver version).
  // Default: $XDG_CACHE_HOME/vkattn, else ~/.cache/vkattn. "" disables the cache.
  std::optional<std::string> pipeline_cache_dir{};
  // Fence wait before ErrorCode::timeout, [1, 2^32 - 1] ms. A transfer's own copy is waited
  // for past it, with a warning (docs/reliability.md: it then has its whole effect, or the
  // device is lost).
  std::uint32_t submit_timeout_ms = 60000;
  // Kernel family; default: $VKATTN_KERNELS ("cpu", "gpu" or "automatic") if set, else automatic.
  std::optional<KernelShape> kernels{};
  // Where messages go; default (empty): stderr, one line each ("vkattn: warning: ...").
  LogCallback log{};
  // The least severe level reported. Default: $VKATTN_LOG ("off", "error", "warning" or
  // "info"), else warning: a first pipeline build is then silent, shown at info.
  std::optional<LogLevel> log_level{};
  // The matrix units; default: $VKATTN_MATRIX ("automatic" or "auto", "off", "on",
  // "standin") if set, else automatic. DeviceLimits::matrix_units says what was decided.
  std::optional<MatrixUnits> matrix_units{};
};

// One Vulkan device as vkattn sees it (for vkattn-info and error messages).
struct DeviceInfo {
  std::uint32_t index = 0;  // position in vkEnumeratePhysicalDevices order
  std::string name;
  std::string type;         // "discrete", "integrated", "virtual", "cpu", "other"
  std::string api_version;  // "1.3.230"
  std::string driver;       // driver name and info
  DeviceLimits limits;
  std::string rejected;  // why vkattn cannot use it; empty when usable
  bool chosen = false;   // the device make_backend() would pick with these options
  // VK_KHR_cooperative_matrix's list as the device reports it (empty without the extension).
  std::vector<MatrixShape> matrix_shapes;
  // Why limits.matrix_units is false with these options ("" when it is true).
  std::string matrix_note;
};

// Enumerates Vulkan devices and marks the one that would be chosen. Throws when Vulkan
// itself is unavailable: Error(unsupported) without a loader, Error(no_device) without a
// driver (or a Vulkan 1.0 loader); and InvalidArgument for options make_backend refuses
// too (0.14.1: a device name with a NUL, an enum no value has; 0.14.5: a $VKATTN_KERNELS
// no kernel family has). An empty or all-rejected list is returned as is.
VKATTN_API std::vector<DeviceInfo> list_devices(const DeviceOptions& options = {});

}  // namespace vkattn
