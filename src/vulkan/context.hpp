// What every Vulkan object of one backend shares. Tensors and command lists hold a
// shared_ptr to it, so the device outlives everything made from it whatever order the
// user destroys things in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/command_list_impl.hpp"
#include "common/log.hpp"
#include "vulkan/device.hpp"
#include "vulkan/instance.hpp"
#include "vulkan/memory.hpp"
#include "vulkan/pipeline.hpp"
#include "vulkan/transfers.hpp"

namespace vkattn::detail {

// A developer's knobs for the GPU-shaped decode kernels, from $VKATTN_DECODE (a list of
// key=value, docs/gpu.md): which kernel, and overrides of what the host plans (0: planned).
// The probes (load_only, skip, interleave=0) compute no valid result.
// How the kernels that can hand values between lanes either way do it: left to the plan,
// or forced (subgroup shuffles, or shared memory). $VKATTN_DECODE's and $VKATTN_PREFILL's
// reduce=auto|subgroup|shared.
enum class ReduceKnob { automatic, subgroup, shared };

struct Encoded;  // encoding.hpp

struct DecodeTuning {
  // automatic: attn_decode_group for big groups of wide heads, else attn_decode.
  enum class Kernel { automatic, decode, group } kernel = Kernel::automatic;
  using Reduce = ReduceKnob;
  Reduce reduce = Reduce::automatic;
  enum class Merge { automatic, last, two_pass } merge = Merge::automatic;
  std::uint32_t keys = 0;            // keys per key group per stage
  std::uint32_t resident = 0;        // workgroups resident per compute unit
  std::uint32_t lanes = 0;           // invocations per key row
  std::uint32_t workgroup = 0;       // invocations per workgroup
  std::uint32_t keys_per_split = 0;  // sets the split count
  bool interleave = true;            // splits take every S-th run of stages (false: contiguous)
  bool load_only = false;            // K/V loads only, no results (probe)
  std::uint32_t skip = 0;            // attn_decode's parts left out (probe): PROBE's bits 1-3
  std::uint32_t depth = 0;           // attn_decode's stages in flight (1: the loop before the ring)
  std::uint32_t run = 0;             // consecutive stages per run of an interleaved split
  bool divide = true;                // splits of equal stage counts (false: the target count as it is)
  // attn_decode_group_f16 for f16_products (packed=1); by default the exact group kernel,
  // which an H200 ran 2.4x faster on absorbed MLA (docs/gpu.md, 2026-11-27 late).
  bool packed = false;
  // attn_decode's shuffle variant moves a row's reference maximum only when a score passes
  // it by ln 2^16 (lazy), skipping most stages' gather of the scores; exact (the default
  // until a GPU run compares them; no faster on lavapipe): every stage.
  bool lazy_max = false;
};
// Parses $VKATTN_DECODE; InvalidArgument naming it and the valid keys when malformed.
DecodeTuning decode_tuning_from_env();
// Whether attn_decode's last workgroup of a tile merges the splits in the same dispatch, or
// a second dispatch does. Automatic: the same dispatch but on MoltenVK, whose Metal makes
// a threadgroup's device-memory writes visible to another only through fences that
// SPIR-V's translation to Metal does not emit for coherent and memoryBarrierBuffer.
bool merge_in_dispatch(DecodeTuning::Merge knob, bool portability_subset);

// A developer's knobs for the tiled kernel (attn_tiled.comp), from $VKATTN_PREFILL
// (docs/kernel-shapes.md): which kernel takes fused attention with many rows per KV head,
// and overrides of the tiled kernel's plan (0: planned).
struct PrefillTuning {
  // automatic: attn_tiled on the GPU shape where whole tiles of 16 rows or more fill,
  // else the lane-per-key kernel; tiled: attn_tiled for every fused attention it fits
  // (Unsupported where it does not); lane_per_key: attn_fused.comp as before it.
  enum class Kernel { automatic, tiled, lane_per_key } kernel = Kernel::automatic;
  using Reduce = ReduceKnob;
  Reduce reduce = Reduce::automatic;
  std::uint32_t rows = 0;                 // query rows per tile
  std::uint32_t keys = 0;                 // keys per tile
  std::uint32_t rows_per_invocation = 0;  // register blocking of scores and output
  std::uint32_t keys_per_invocation = 0;
  bool prefetch = true;  // the next tile's K and V loads issued while a tile computes
  bool tiled_tuned() const { return rows || keys || rows_per_invocation || keys_per_invocation; }
  // The matrix kernel's row split (attn_mt.comp): rows and keys per tile (0: planned),
  // where its queries live (automatic: shared memory, as planned), and whether the next
  // tile's K and V are loaded into registers while a tile computes (any mapping).
  std::uint32_t matrix_rows = 0, matrix_keys = 0;
  enum class MatrixQueries { automatic, shared, registers } matrix_queries = MatrixQueries::automatic;
  bool matrix_prefetch = false;
  bool matrix_batch = false;  // without the prefetch: a tile's loads all issued, then stored (same tiles)
  // attn_mt2 (NV cooperative matrices 2) where the device has it and the plan allows; off:
  // attn_mt's KHR form everywhere (tests and probes compare the two).
  bool matrix_nv2 = true;
  // A probe's parts of the matrix kernel left out (attn_mt.comp's MT_SKIP bits: loads,
  // scalar pass, products, marks after the first tile's); its results are not valid.
  std::uint32_t matrix_skip = 0;
  bool matrix_tuned() const {
    return matrix_rows || matrix_keys || matrix_queries != MatrixQueries::automatic || matrix_prefetch;
  }
};
PrefillTuning prefill_tuning_from_env();

// The iterations a kernel's loop may take on llvmpipe (its limit is 65,535), with room:
// CPU devices' plans split keys so that no loop runs past it.
constexpr std::uint64_t kCpuLoopLimit = 60000;

// A tile planner's shared-memory budget: |cap|, what its own plans keep to, or where a
// tile was asked for ($VKATTN_PREFILL's knobs, |tuned|) all the device has (|device_max|).
inline std::uint64_t tile_budget(std::uint64_t device_max, bool tuned, std::uint64_t cap) {
  return tuned ? device_max : std::min(device_max, cap);
}

// $VKATTN_DECODE and $VKATTN_PREFILL (the variable |var|; unset or empty: nothing): a
// comma-separated list of key=value, each handed to |take|, which returns false for one it
// does not know; InvalidArgument naming |var| and |valid| for that or a malformed item.
void parse_knobs(const char* var, const char* valid,
                 const std::function<bool(const std::string& key, const std::string& value)>& take);
// reduce=auto|subgroup|shared's |value| into |out|; false for another value.
bool parse_reduce(const std::string& value, ReduceKnob& out);
// A probe's parts: "none", or some of |names| joined by '+', each once, into |bits| (bit i
// for names[i]); false for anything else.
bool parse_parts(const std::string& value, std::initializer_list<std::string_view> names, std::uint32_t& bits);
// |value| as a number up to 2^20, else InvalidArgument naming |var| and |key|.
std::uint32_t knob_number(const char* var, const std::string& key, const std::string& value);

// Every member is set when the context is made and never changes after; what changes
// (the pipeline map, heap use, the queue, the validation messages, device loss, what
// transfers keep) is guarded where it lives, so any number of threads may use one context
// at once.
struct Context {
  // Declaration order is destruction order reversed: transfers, pipelines, then device,
  // then instance.
  std::shared_ptr<const Logger> log;
  std::unique_ptr<Instance> instance;
  PhysicalDevice physical;
  std::unique_ptr<Device> device;
  std::unique_ptr<PipelineCache> pipelines;
  TransferCache transfers;  // staging buffers and submissions kept between transfers
  DeviceLimits limits;      // after DeviceOptions::cap_limits and $VKATTN_CAP_LIMITS
  DeviceOptions options;
  bool mapped_tensors = false;           // unified memory and no forced staging
  KernelShape shape = KernelShape::cpu;  // resolved: cpu or gpu
  bool external = false;                 // instance, device and queue are the caller's (external.cpp)
  // false: the caller's VkDeviceCreateInfo enabled no timelineSemaphore feature (a
  // semaphore value would be invalid usage; true where it gave none: vkattn cannot tell).
  bool timeline_semaphores = true;
  DecodeTuning decode;    // $VKATTN_DECODE
  PrefillTuning prefill;  // $VKATTN_PREFILL

  // A device buffer for |bytes|, checked against maxStorageBufferRange and the heap.
  std::unique_ptr<Buffer> device_buffer(std::uint64_t bytes, const char* what);
  // Synchronous host<->buffer copies, through a staging buffer unless |buffer| is mapped; a
  // write of several runs (each from its byte offset of |buffer| on) in one submission.
  void write(Buffer& buffer, std::span<const std::uint8_t> bytes);
  struct ByteRun {
    VkDeviceSize offset;
    std::span<const std::uint8_t> bytes;
  };
  void write(Buffer& buffer, std::span<const ByteRun> runs);
  void read(const Buffer& buffer, std::span<std::uint8_t> bytes);
  // Fills |buffer| with zeros (on the device when it is not mapped: no host copy).
  void zero(Buffer& buffer);
};

class VulkanTensor final : public TensorImpl {
 public:
  // |zero|: filled with zeros, so that no tensor a caller sees exposes another
  // allocation's old contents. Ops' intermediate results (written before they are read,
  // never seen by a caller) skip it.
  VulkanTensor(std::shared_ptr<Context> ctx, const Shape& shape, DType dtype, bool zero = true);
  // A view of a caller's buffer (wrap; external.cpp).
  VulkanTensor(std::shared_ptr<Context> ctx, const Shape& shape, DType dtype, std::unique_ptr<Buffer> borrowed);
  std::shared_ptr<Context> context;
  std::unique_ptr<Buffer> buffer;  // words * 4 bytes, padded to 16
  // The submissions that may still read or write it: asynchronous ones (CommandList::
  // submit) and those a timeout left running. Host copies of it wait for those that write
  // it, host writes over it for all. Each names its encoding, which its list and its
  // Submitted handles own (the caller may drop the handle: the work runs on) and whose
  // end waits for the work, so an expired one has finished; a list's newer submission
  // replaces its older, which finished first. Threads submitting lists that read one
  // tensor meet here: under |uses_lock|.
  struct Use {
    std::weak_ptr<Encoded> enc;
    std::uint64_t number;
    bool writes;
  };
  mutable std::mutex uses_lock;
  std::vector<Use> uses;
  void note_use(const std::shared_ptr<Encoded>& enc, std::uint64_t number, bool writes);
  void forget_use(const std::shared_ptr<Encoded>& enc, std::uint64_t number) noexcept;

  void store_runs(std::span<const WordRun> runs) override;
  bool overlaps(const TensorImpl& other) const override;
};

// Error(out_of_memory) for a tensor of more than 2^32 - 1 elements within |max_range|
// bytes (maxStorageBufferRange): the kernels index elements in 32 bits, and elements past
// 2^32 would alias the first ones.
void check_element_indices(const Shape& shape, std::size_t numel, std::uint64_t bytes, std::uint64_t max_range);

}  // namespace vkattn::detail
