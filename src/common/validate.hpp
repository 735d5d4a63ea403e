// Argument checks shared by the ops' own checks (declared with their calls in op_call.hpp).
// Each throws InvalidArgument naming the op, the parameter, its value and the valid range,
// before anything is recorded.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "common/heap_ledger.hpp"
#include "common/tensor_impl.hpp"
#include "vkattn/error.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::detail {

std::string shape_string(const Shape& shape);

// How an invalid handle is named.
inline constexpr const char* kEmptyTensor = "an empty Tensor (default-constructed or moved-from)";
inline constexpr const char* kEmptyCache = "an empty KvCache (default-constructed or moved-from)";
// Most heads alibi_slopes() serves (no model has more than a few hundred).
inline constexpr std::size_t kMaxAlibiHeads = 65536;

// A shape and dtype with no storage: what the checks of one op compare another's arguments
// against (the keys a cache stands for, the scores attention never writes).
class ShapeOnly final : public TensorImpl {
 public:
  ShapeOnly(Shape shape, DType dtype) : TensorImpl(nullptr, std::move(shape), dtype) {}
  void store_runs(std::span<const WordRun>) override {}
};

// Shared by the checks: a number as errors print it; an op's output is none of its
// inputs; a finite positive value.
std::string num(double v);
void check_distinct(const char* op, const char* out_name, const TensorImpl& out,
                    std::initializer_list<std::pair<const char*, const TensorImpl*>> inputs);
void check_positive(const char* op, const std::string& param, double v);
bool finite_float(double v);  // finite in float too (|v| <= 3.4e38; false for NaN)

// A tensor argument |name| of rank 3 (|dims| names its axes in the message); f32 (or
// f16); of a K/V type (f32, f16, q8_0, q4_0); of shape |want|.
void check_rank3(const char* op, const char* name, const TensorImpl& t, const char* dims);
void check_dtype(const char* op, const char* name, const TensorImpl& t, bool allow_f16);
void check_kv_dtype(const char* op, const char* name, const TensorImpl& t);
void check_shape(const char* op, const char* name, const TensorImpl& t, std::span<const std::size_t> want);
void check_shape(const char* op, const char* name, const TensorImpl& t, std::initializer_list<std::size_t> want);

// Inside a handler of |e|, a tensor allocation's Error: rethrows it, an out_of_memory one
// told as |what|'s and |op|'s, the allocation named as the caller knows it ("tensor needs
// N bytes ..." becomes "|what| needs N bytes ...").
[[noreturn]] void rethrow_allocation(const Error& e, const std::string& what, const std::string& op);

// DeviceOptions a backend can be made with (make_backend, both forms): a timeout of 0 ms
// would fail every submission (a fence is never signalled the moment it is submitted).
void check_device_options(const DeviceOptions& options, const char* op);

// A shape and dtype a tensor may have (Backend::tensor, wrap).
void check_new_tensor(const char* op, const Shape& shape, DType dtype);

// |t| is a live tensor of the backend |owner|.
const std::shared_ptr<TensorImpl>& check_tensor(const char* op, const char* param, const Tensor& t, const void* owner);

// |cache| is a live cache of the backend |owner|, which |made_by| names ("this backend").
const std::shared_ptr<KvCacheImpl>& check_cache(const char* op, const KvCache& cache, const void* owner, const char* made_by);

// What check_rope_config calls the config and the head dim in its errors (a cache's are
// config.rope_config and config.head_dim).
struct RopeNames {
  const char* config = "config";
  const char* head_dim = "head_dim";
};

// The dims a RoPE config rotates: |rotary_dim|, or where it is 0 those from |rotary_offset|
// to the row's end (none where the offset is past it, which the checks refuse).
inline std::size_t rotated_dims(std::size_t rotary_dim, std::size_t rotary_offset, std::size_t head_dim) {
  return rotary_dim != 0 ? rotary_dim : rotary_offset <= head_dim ? head_dim - rotary_offset : 0;
}

// The dims |config| rotates in a row of |head_dim| (rotated_dims), or InvalidArgument naming
// the head dim, rotary_offset or rotary_dim where they leave no whole pairs inside the row.
std::size_t check_rope_dims(const char* op, const RopeConfig& config, std::size_t head_dim, const RopeNames& names = {});

// Checks every field of |config| for a tensor with |head_dim|; returns it with rotary_dim
// resolved (rotated_dims).
RopeConfig check_rope_config(const char* op, const RopeConfig& config, std::size_t head_dim, const RopeNames& names = {});
inline constexpr RopeNames kCacheRopeNames{"config.rope_config", "config.head_dim"};

// Each of |v| (positions or sequence ids, named |name|) in [0, 2^31).
void check_nonnegative(const char* op, const char* name, std::span<const std::int32_t> v);

}  // namespace vkattn::detail
