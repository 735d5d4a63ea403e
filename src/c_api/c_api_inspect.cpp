// The C API's queries added in 0.12 (vkattn_inspect.h): the last error's parts, a cache's
// configuration, a device's cooperative-matrix shapes and the dtypes' names. (The command
// list's queries are with the ops, in c_api_ops.cpp; the limits with the devices.)
#include "c_api/c_api_internal.hpp"

using namespace vkattn::c_api;
using vkattn::InvalidArgument;

extern "C" {

vkattn_status vkattn_last_error_details(vkattn_error_details* details, size_t details_size) {
  // Not guarded(): it must leave the last error as it is, its own refusals included.
  const LastErrorParts p = last_error_parts();
  try {
    write_struct(
        "vkattn_last_error_details", "details", details, details_size,
        vkattn_error_details{
            .struct_size = 0, .vk_result = p.vk_result, .op = p.op, .call = p.call, .param = p.param, .message = p.message});
    return VKATTN_OK;
  } catch (...) {  // NULL, or a size outside [sizeof, 4096]: refused, nothing recorded
    return VKATTN_ERROR_INVALID_ARGUMENT;
  }
}

vkattn_status vkattn_kv_cache_get_config(const vkattn_kv_cache* cache, vkattn_kv_cache_config* config, size_t config_size) {
  const char* fn = "vkattn_kv_cache_get_config";
  return guarded([&] {
    const vkattn_kv_cache& c = need(fn, "cache", cache);  // its rope storage: what the result points to
    const vkattn::KvCacheConfig& k = c.impl.config();
    c.freq_factors = k.rope_config.freq_factors;
    c.rope = c_rope_config(k.rope_config);
    c.rope.freq_factors = c.freq_factors.empty() ? nullptr : c.freq_factors.data();
    c.rope.n_freq_factors = c.freq_factors.size();
    vkattn_kv_cache_config out = c_kv_cache_config(k);
    out.rope_config = &c.rope;
    write_struct(fn, "config", config, config_size, out);
  });
}

vkattn_status vkattn_device_list_matrix_shape_count(const vkattn_device_list* list, size_t index, size_t* count) {
  const char* fn = "vkattn_device_list_matrix_shape_count";
  return guarded([&] { need(fn, "count", count) = device_at(fn, need(fn, "list", list), index).matrix_shapes.size(); });
}

vkattn_status vkattn_device_list_matrix_shape(const vkattn_device_list* list, size_t index, size_t shape_index,
                                              vkattn_matrix_shape* shape, size_t shape_size) {
  const char* fn = "vkattn_device_list_matrix_shape";
  return guarded([&] {
    const auto& shapes = device_at(fn, need(fn, "list", list), index).matrix_shapes;
    if (shape_index >= shapes.size()) {
      throw InvalidArgument(fn, "shape_index", std::to_string(shape_index), "[0, count = " + std::to_string(shapes.size()) + ")");
    }
    const vkattn::MatrixShape& m = shapes[shape_index];
    write_struct(fn, "shape", shape, shape_size,
                 vkattn_matrix_shape{.struct_size = 0,
                                     .m = m.m,
                                     .n = m.n,
                                     .k = m.k,
                                     .a = m.a.c_str(),
                                     .b = m.b.c_str(),
                                     .c = m.c.c_str(),
                                     .result = m.result.c_str(),
                                     .scope = m.scope.c_str(),
                                     .saturating = m.saturating ? 1u : 0u,
                                     .reserved = 0});
  });
}

const char* vkattn_dtype_name(vkattn_dtype dtype) {  // as vkattn_status_string: no status, no last error
  return vkattn::to_string(static_cast<vkattn::DType>(dtype));
}

}  // extern "C"
