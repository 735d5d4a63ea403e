// The public Tensor, CommandList and Backend members: argument checks and dtype
// conversion live here once, so both backends only move words and run checked ops. Each
// entry point turns a host allocation failure below it into Error(out_of_memory) naming
// its op: std::bad_alloc never reaches the caller.
#include <cstring>
#include <new>

#include "common/half.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/quant.hpp"
#include "common/shape_math.hpp"
#include "common/tensor_impl.hpp"
#include "common/validate.hpp"
#include "vkattn/backend.hpp"

namespace vkattn {

namespace detail {
TensorImpl::TensorImpl(const void* owner_, Shape shape_, DType dtype_)
    : owner(owner_), shape(std::move(shape_)), dtype(dtype_), numel(detail::numel(shape)), words(storage_words(numel, dtype)) {}
TensorImpl::~TensorImpl() = default;
}  // namespace detail

Tensor::Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
Tensor::~Tensor() = default;

static const detail::TensorImpl& live(const std::shared_ptr<detail::TensorImpl>& impl) {
  if (!impl) throw InvalidArgument("tensor", "this", detail::kEmptyTensor, "a tensor made by Backend::tensor");
  return *impl;
}
const Shape& Tensor::shape() const { return live(impl_).shape; }
DType Tensor::dtype() const { return live(impl_).dtype; }
std::size_t Tensor::numel() const { return live(impl_).numel; }
std::size_t Tensor::bytes() const { return live(impl_).words * 4; }

Backend::~Backend() = default;

Tensor Backend::tensor(const Shape& shape, DType dtype) try {
  detail::check_new_tensor("tensor", shape, dtype);
  return Tensor(make_tensor(shape, dtype));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("tensor");
}

KvCache Backend::kv_cache(const KvCacheConfig& config) try {
  const detail::KvShapes shapes = detail::check_kv_cache_config(config);
  Tensor k, v;
  try {
    k = tensor(shapes.k, config.dtype);
    if (!config.latent) v = tensor(shapes.v, config.dtype);  // a latent cache's V is inside K
  } catch (const Error& e) {
    const std::string what = config.latent          ? "K (latent: V inside it) of shape " + detail::shape_string(shapes.k)
                             : shapes.k == shapes.v ? "K and V of shape " + detail::shape_string(shapes.k)
                                                    : "K of shape " + detail::shape_string(shapes.k) + " and V of shape " +
                                                          detail::shape_string(shapes.v);
    throw Error(e.code(), what + ": " + e.message(), e.call(), e.vk_result(), "kv_cache");
  }
  auto impl = std::make_shared<detail::KvCacheImpl>(owner_tag(), config, k.impl(), v.impl());
  // The slot table kv_append keeps on the device and attention reads there: 4 bytes per
  // slot of every sequence, and a paged cache's block tables.
  try {
    impl->slots = make_tensor({impl->slot_table_words()}, DType::i32);
  } catch (const Error& e) {
    detail::rethrow_allocation(e,
                               "the slot table of n_seqs x capacity = " + std::to_string(config.n_seqs) + " x " +
                                   std::to_string(config.capacity) + " slots",
                               "kv_cache");
  }
  impl->publish();
  return KvCache(std::move(impl));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("kv_cache");
}

static void check_upload(const char* op, const Tensor& t, const void* owner, std::size_t n, bool want_int) {
  const auto& impl = detail::check_tensor(op, "tensor", t, owner);
  const bool is_int = impl->dtype == DType::i32;
  if (is_int != want_int) {
    throw InvalidArgument(op, "tensor.dtype", to_string(impl->dtype),
                          want_int ? "i32 for int32 data" : "f32 or f16 for float data");
  }
  if (n != impl->numel) {
    throw InvalidArgument(op, "data.size()", std::to_string(n), "tensor.numel() = " + std::to_string(impl->numel));
  }
}

void Backend::upload(Tensor& tensor, std::span<const float> data) try {
  check_upload("upload", tensor, owner_tag(), data.size(), false);
  auto& impl = *tensor.impl();
  std::vector<std::uint32_t> words(impl.words, 0);
  if (impl.dtype == DType::f32) {
    std::memcpy(words.data(), data.data(), data.size_bytes());
  } else if (detail::is_quantized(impl.dtype)) {
    for (std::size_t b = 0; b < data.size() / detail::kQuantBlock; ++b) {
      detail::store_block(impl.dtype, data.subspan(b * detail::kQuantBlock).first<detail::kQuantBlock>(), words, impl.numel, b);
    }
  } else {
    for (std::size_t i = 0; i < data.size(); ++i) {
      words[i / 2] |= std::uint32_t{detail::float_to_half(data[i])} << (16 * (i % 2));
    }
  }
  write_words(impl, words);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("upload");
}

void Backend::upload(Tensor& tensor, std::span<const std::int32_t> data) try {
  check_upload("upload", tensor, owner_tag(), data.size(), true);
  std::vector<std::uint32_t> words(data.size());
  std::memcpy(words.data(), data.data(), data.size_bytes());
  write_words(*tensor.impl(), words);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("upload");
}

std::vector<float> Backend::download(const Tensor& tensor) try {
  const auto& impl = detail::check_tensor("download", "tensor", tensor, owner_tag());
  if (impl->dtype == DType::i32) {
    throw InvalidArgument("download", "tensor.dtype", "i32", "f32 or f16 (use download_i32)");
  }
  std::vector<std::uint32_t> words = read_words(*impl);
  std::vector<float> out(impl->numel);
  if (impl->dtype == DType::f32) {
    std::memcpy(out.data(), words.data(), out.size() * sizeof(float));
  } else if (detail::is_quantized(impl->dtype)) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = detail::dequantize(impl->dtype, words, impl->numel, i);
  } else {
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = detail::half_to_float(static_cast<std::uint16_t>(words[i / 2] >> (16 * (i % 2))));
    }
  }
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("download");
}

void Backend::upload_raw(Tensor& tensor, std::span<const std::uint8_t> bytes) try {
  const auto& impl = detail::check_tensor("upload_raw", "tensor", tensor, owner_tag());
  if (bytes.size() != impl->words * 4) {
    throw InvalidArgument("upload_raw", "bytes.size()", std::to_string(bytes.size()),
                          "tensor.bytes() = " + std::to_string(impl->words * 4));
  }
  std::vector<std::uint32_t> words(impl->words);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  write_words(*impl, words);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("upload_raw");
}

std::vector<std::uint8_t> Backend::download_raw(const Tensor& tensor) try {
  const auto& impl = detail::check_tensor("download_raw", "tensor", tensor, owner_tag());
  const std::vector<std::uint32_t> words = read_words(*impl);
  std::vector<std::uint8_t> bytes(words.size() * 4);
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("download_raw");
}

std::vector<std::int32_t> Backend::download_i32(const Tensor& tensor) try {
  const auto& impl = detail::check_tensor("download_i32", "tensor", tensor, owner_tag());
  if (impl->dtype != DType::i32) {
    throw InvalidArgument("download_i32", "tensor.dtype", to_string(impl->dtype), "i32");
  }
  std::vector<std::uint32_t> words = read_words(*impl);
  std::vector<std::int32_t> out(impl->numel);
  std::memcpy(out.data(), words.data(), out.size() * sizeof(std::int32_t));
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("download_i32");
}

}  // namespace vkattn
