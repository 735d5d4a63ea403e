// The config structs as Python classes: every field an attribute with the C++ name, set by
// keyword in the constructor (RopeConfig(base=5e5, scaling="llama3", factor=8)), enums
// also by name. Ops take the same keywords directly (configs_arg in bindings.hpp). Units,
// defaults and ranges are the C++ headers' (include/vkattn/types.hpp, kv_cache.hpp), and
// the stub vkattn/__init__.pyi repeats them.
#include <string>

#include "bindings.hpp"

namespace vkattn::python {
namespace {

// A keyword the constructor also takes for a field: the name a model's config.json gives it.
struct Alias {
  const char* alias;
  const char* field;
};

// Keyword-only construction (also by |aliases|) and repr for a config class.
template <class C, class Class>
void config_basics(Class& cls, const char* name, std::initializer_list<const char*> fields,
                   std::initializer_list<Alias> aliases = {}) {
  std::vector<Alias> a(aliases);
  cls.def(py::init([name, a](const py::kwargs& kw) {
    py::dict fields_given = kw.attr("copy")().cast<py::dict>();
    for (const Alias& x : a) {
      if (!fields_given.contains(x.alias)) continue;
      if (fields_given.contains(x.field)) {
        throw py::type_error(std::string(name) + "() got both '" + x.field + "' and its alias '" + x.alias + "'");
      }
      fields_given[x.field] = fields_given.attr("pop")(x.alias);
    }
    return config_arg<C>(py::none(), fields_given, name);
  }));
  std::vector<const char*> f(fields);
  cls.def("__repr__", [name, f](py::handle self) {
    std::string s = std::string(name) + "(";
    for (std::size_t i = 0; i < f.size(); ++i) {
      const py::object v = self.attr(f[i]);
      // Enums as RopeLayout.half rather than <RopeLayout.half: 1>.
      const bool is_enum = py::hasattr(py::type::of(v), "__members__");
      s += (i ? ", " : "") + std::string(f[i]) + "=" + (is_enum ? py::str(v) : py::repr(v)).cast<std::string>();
    }
    return s + ")";
  });
}

void bind_rope(py::module_& m) {
  py::class_<YarnParams> yarn(m, "YarnParams", "YaRN's parameters (RopeConfig.yarn); keywords as the fields.");
  config_basics<YarnParams>(yarn, "YarnParams", {"beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"});
  field(yarn, "beta_fast", &YarnParams::beta_fast, "rotations bounding the extrapolated end; default 32");
  field(yarn, "beta_slow", &YarnParams::beta_slow, "rotations bounding the interpolated end; default 1");
  field(yarn, "mscale", &YarnParams::mscale, "DeepSeek-style attention factor term; 0 = unused");
  field(yarn, "mscale_all_dim", &YarnParams::mscale_all_dim, "DeepSeek-style; 0 = unused");
  field(yarn, "truncate", &YarnParams::truncate, "floor/ceil the ramp bounds; default True");

  py::class_<Llama3Params> llama3(m, "Llama3Params", "Llama 3.1's band limits (RopeConfig.llama3).");
  config_basics<Llama3Params>(llama3, "Llama3Params", {"low_freq_factor", "high_freq_factor"});
  field(llama3, "low_freq_factor", &Llama3Params::low_freq_factor, "default 1");
  field(llama3, "high_freq_factor", &Llama3Params::high_freq_factor, "default 4; >= low_freq_factor");

  py::class_<MRope> mrope(m, "MRope",
                          "M-RoPE (RopeConfig.mrope): rotary pairs per position (t, h, w), as config.json's mrope_section,\n"
                          "and their layout; rope then takes positions [n_tokens, 3].");
  config_basics<MRope>(mrope, "MRope", {"sections", "layout"});
  field(mrope, "sections", &MRope::sections, "three counts adding up to rotary_dim / 2");
  enum_property(mrope, "layout", &MRope::layout, "MRopeLayout or its name; default 'contiguous'");

  py::class_<RopeConfig> rope(m, "RopeConfig",
                              "RoPE's configuration (vkattn::RopeConfig); CommandList.rope takes the same keywords.");
  config_basics<RopeConfig>(rope, "RopeConfig",
                            {"layout", "rotary_dim", "rotary_offset", "base", "scaling", "factor", "original_context",
                             "sequence_length", "yarn", "llama3", "freq_factors", "attention_factor", "mrope"});
  enum_property(rope, "layout", &RopeConfig::layout, "RopeLayout or its name; default 'half'");
  field(rope, "rotary_dim", &RopeConfig::rotary_dim, "dims rotated, even; default 0 = head_dim - rotary_offset");
  field(rope, "rotary_offset", &RopeConfig::rotary_offset,
        "the first dim rotated, even: dims [rotary_offset, rotary_offset + rotary_dim) rotate; default 0");
  field(rope, "base", &RopeConfig::base, "theta_i = base^(-2i/rotary_dim); default 10000");
  enum_property(rope, "scaling", &RopeConfig::scaling, "RopeScaling or its name; default 'none'");
  field(rope, "factor", &RopeConfig::factor, "context extension factor; default 1");
  field(rope, "original_context", &RopeConfig::original_context, "trained context length (dynamic_ntk, yarn, llama3); default 0");
  field(rope, "sequence_length", &RopeConfig::sequence_length, "dynamic_ntk: current length; default 0 = 1 + largest position");
  field(rope, "yarn", &RopeConfig::yarn, "YarnParams (yarn only)");
  field(rope, "llama3", &RopeConfig::llama3, "Llama3Params (llama3 only)");
  field(rope, "freq_factors", &RopeConfig::freq_factors, "factors: rotary_dim / 2 values, each > 0");
  field(rope, "attention_factor", &RopeConfig::attention_factor,
        "multiplies the rotated dims; default None (yarn: 0.1 ln(factor) + 1, else 1)");
  field(rope, "mrope", &RopeConfig::mrope, "MRope: three positions per token; default None");

  m.def(
      "rope_frequencies",
      [](const IntArg& head_dim, const IntArg& max_position, py::object config, const py::kwargs& kw) {
        const auto dim = head_dim.as<std::size_t>("rope_frequencies", "head_dim");  // in the order given
        const auto most = max_position.as<std::int32_t>("rope_frequencies", "max_position");
        const RopeFrequencies f = rope_frequencies(config_arg<RopeConfig>(config, kw, "rope_frequencies"), dim, most);
        return py::make_tuple(py::array_t<double>(static_cast<py::ssize_t>(f.theta.size()), f.theta.data()), f.attention_factor);
      },
      py::arg("head_dim"), py::arg("max_position") = 0, py::kw_only(), py::arg("config") = py::none(),
      "(theta, attention_factor): the rotary_dim / 2 angles per token (radians, float64) and the\n"
      "factor a RopeConfig (or its fields as keywords) resolves to for head_dim.");
}

void bind_attention(py::module_& m) {
  py::class_<QueryTemperature> temp(
      m, "QueryTemperature",
      "Per-position query temperature t(p) = 1 + scale * ln(1 + floor((p + offset) / floor_scale))\n"
      "(AttentionConfig.query_temperature; Llama 4, Ministral 3); keywords as the fields, and\n"
      "attn_scale for scale (Llama 4's config.json: attn_scale, floor_scale).");
  config_basics<QueryTemperature>(temp, "QueryTemperature", {"floor_scale", "scale", "offset"}, {{"attn_scale", "scale"}});
  field(temp, "floor_scale", &QueryTemperature::floor_scale, "default 8192; >= 1");
  field(temp, "scale", &QueryTemperature::scale, "default 0.1; finite");
  field(temp, "offset", &QueryTemperature::offset, "added to the position; default 1 (Llama 4); < 2^31");

  py::class_<AttentionConfig> attn(
      m, "AttentionConfig", "Attention's configuration (vkattn::AttentionConfig); the attention ops take the same keywords.");
  config_basics<AttentionConfig>(attn, "AttentionConfig",
                                 {"scale", "causal", "window", "window_type", "chunk", "query_temperature", "softcap",
                                  "softcap_order", "alibi", "alibi_slopes", "sinks", "path", "precision", "mask_keys"});
  field(attn, "scale", &AttentionConfig::scale, "default None = 1/sqrt(head_dim)");
  field(attn, "causal", &AttentionConfig::causal, "keys with pos_j <= pos_t only; default True");
  field(attn, "window", &AttentionConfig::window, "keys with pos_t - pos_j < window; default None; >= 1");
  enum_property(attn, "window_type", &AttentionConfig::window_type,
                "WindowType or its name: 'trailing' (default) or 'symmetric' (|pos_t - pos_j| <= window // 2)");
  field(attn, "chunk", &AttentionConfig::chunk,
        "keys with pos_j // chunk == pos_t // chunk only (Llama 4: 8192); default None; >= 1");
  field(attn, "query_temperature", &AttentionConfig::query_temperature,
        "QueryTemperature: each query row's scores times t(pos_t); default None");
  field(attn, "softcap", &AttentionConfig::softcap, "softcap * tanh(s / softcap); default None; > 0");
  enum_property(attn, "softcap_order", &AttentionConfig::softcap_order, "SoftcapOrder or its name; default 'scale_then_cap'");
  field(attn, "alibi", &AttentionConfig::alibi, "ALiBi with the standard slopes; default False");
  field(attn, "alibi_slopes", &AttentionConfig::alibi_slopes, "per head slopes (implies ALiBi); default []");
  field(attn, "sinks", &AttentionConfig::sinks, "per head sink logits in the softmax denominator; default []");
  enum_property(attn, "path", &AttentionConfig::path,
                "AttentionPath or its name (CommandList.attention only); default 'automatic'");
  enum_property(attn, "precision", &AttentionConfig::precision,
                "AttentionPrecision or its name (CommandList.attention only): 'f32' (default) or 'f16_products'");
  field(attn, "mask_keys", &AttentionConfig::mask_keys,
        "CommandList.attention only: at most this many keys per token's mask row are not -inf\n"
        "(DeepSeek V3.2's top-k), so kernels may read only those (stats: 'sparse'); a row with more\n"
        "is read whole; default 0 (no promise); with a mask only, <= n_keys");
}

void bind_cache_config(py::module_& m) {
  py::class_<KvCacheConfig> kv(m, "KvCacheConfig",
                               "A KV cache's configuration (vkattn::KvCacheConfig); Backend.kv_cache takes the same keywords.");
  config_basics<KvCacheConfig>(kv, "KvCacheConfig",
                               {"n_seqs", "n_kv_heads", "head_dim", "capacity", "dtype", "n_sinks", "rope", "rope_config",
                                "v_head_dim", "latent", "paged", "block_size", "n_blocks"});
  field(kv, "n_seqs", &KvCacheConfig::n_seqs, "sequences held at once; default 1");
  field(kv, "n_kv_heads", &KvCacheConfig::n_kv_heads, "required, >= 1");
  field(kv, "head_dim", &KvCacheConfig::head_dim, "required, in [1, 576]");
  field(kv, "capacity", &KvCacheConfig::capacity, "required: slots per sequence, in (n_sinks, 2^30]");
  field(kv, "v_head_dim", &KvCacheConfig::v_head_dim, "V's head dim where it differs from K's; default 0 = head_dim");
  field(kv, "latent", &KvCacheConfig::latent,
        "V is the first v_head_dim dims of each key row, stored once (absorbed MLA; v_head_dim <= head_dim;\n"
        "kv_append takes v=None); default False");
  field(kv, "paged", &KvCacheConfig::paged,
        "K and V in a pool of n_blocks blocks of block_size slots shared by the sequences (capacity\n"
        "a multiple of block_size); default False");
  field(kv, "block_size", &KvCacheConfig::block_size, "paged: slots per block, a power of two; default 16");
  field(kv, "n_blocks", &KvCacheConfig::n_blocks, "paged: required, the pool's blocks");
  kv.def_property(
      "dtype", [](const KvCacheConfig& c) { return c.dtype; },
      [](KvCacheConfig& c, py::handle v) { c.dtype = dtype_arg(v, "KvCacheConfig", "dtype"); },
      "f32, f16, q8_0 or q4_0; default f16");
  field(kv, "n_sinks", &KvCacheConfig::n_sinks, "first positions kept for ever; default 0");
  enum_property(kv, "rope", &KvCacheConfig::rope, "KvRope or its name; default 'stored'");
  field(kv, "rope_config", &KvCacheConfig::rope_config, "on_read: the RopeConfig attention applies");
}

void bind_devices(py::module_& m) {
  py::class_<DeviceLimits> limits(m, "DeviceLimits", "The device limits vkattn plans with (read-only here except as a cap).");
  config_basics<DeviceLimits>(limits, "DeviceLimits",
                              {"subgroup_size", "max_shared_memory", "max_workgroup_invocations", "max_storage_buffer_range",
                               "max_storage_buffers", "device_local_bytes", "timestamps", "unified_memory", "compute_units"});
#define VKATTN_LIMIT(f, doc) field(limits, #f, &DeviceLimits::f, doc)
  VKATTN_LIMIT(subgroup_size, "the subgroup size kernels plan with");
  VKATTN_LIMIT(subgroup_arithmetic, "subgroup arithmetic operations in compute shaders");
  VKATTN_LIMIT(subgroup_shuffle, "subgroup shuffles in compute shaders");
  VKATTN_LIMIT(subgroup_size_control, "VK_EXT_subgroup_size_control, usable (the GPU-shaped kernels)");
  VKATTN_LIMIT(subgroup_min_size, "the smallest subgroup size the device may run");
  VKATTN_LIMIT(subgroup_max_size, "the largest subgroup size the device may run");
  VKATTN_LIMIT(subgroup_vote, "subgroup vote operations in compute shaders");
  VKATTN_LIMIT(max_shared_memory, "bytes of workgroup shared memory");
  VKATTN_LIMIT(max_workgroup_invocations, "invocations per workgroup");
  VKATTN_LIMIT(max_workgroup_size, "invocations per workgroup along x, y and z");
  VKATTN_LIMIT(max_workgroup_count, "workgroups per dispatch along x, y and z");
  VKATTN_LIMIT(max_storage_buffer_range, "bytes one storage buffer binding may span");
  VKATTN_LIMIT(max_storage_buffers, "storage buffers one shader stage may bind");
  VKATTN_LIMIT(storage_offset_alignment, "minStorageBufferOffsetAlignment, bytes");
  VKATTN_LIMIT(max_texel_buffer_elements, "16-byte texels a texel view may span (0: texel reads off)");
  VKATTN_LIMIT(device_local_bytes, "bytes of the largest device-local heap (in a cap: every heap lowered to it)");
  VKATTN_LIMIT(storage_16bit, "16-bit storage buffer access");
  VKATTN_LIMIT(shader_float16, "f16 arithmetic in shaders");
  VKATTN_LIMIT(timestamps, "timestamp queries on the compute queue");
  VKATTN_LIMIT(timestamp_period_ns, "nanoseconds per timestamp tick");
  VKATTN_LIMIT(unified_memory, "device-local memory the host can map (integrated GPUs, CPU devices)");
  VKATTN_LIMIT(compute_units, "compute units (SMs, CUs, EUs) where the driver says; 0 where it does not");
  VKATTN_LIMIT(matrix_units, "the matrix kernels run on the device's matrix units (cooperative matrices)");
  VKATTN_LIMIT(matrix_standin, "the matrix kernels run as plain GLSL in the matrix units' place");
#undef VKATTN_LIMIT
  m.def("spec_minimum_limits", &spec_minimum_limits, "The Vulkan 1.1 minimum of every limit (features off).");

  py::class_<MatrixShape>(m, "MatrixShape", "One entry of a device's VK_KHR_cooperative_matrix list: result = A B + C.")
      .def_readonly("m", &MatrixShape::m, "rows of A and of the result")
      .def_readonly("n", &MatrixShape::n, "columns of B and of the result")
      .def_readonly("k", &MatrixShape::k, "columns of A, rows of B")
      .def_readonly("a", &MatrixShape::a, "component type: 'f16', 'f32', 's8', 'bf16', ... or 'type <value>'")
      .def_readonly("b", &MatrixShape::b, "B's component type")
      .def_readonly("c", &MatrixShape::c, "C's component type")
      .def_readonly("result", &MatrixShape::result, "the result's component type")
      .def_readonly("scope", &MatrixShape::scope, "'subgroup', 'workgroup', 'device', 'queue family' or 'scope <value>'")
      .def_readonly("saturating", &MatrixShape::saturating, "whether integer results saturate")
      .def("__repr__", [](const MatrixShape& s) {
        return "MatrixShape(" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " + s.a + " x " +
               s.b + " + " + s.c + " -> " + s.result + ", " + s.scope + (s.saturating ? ", saturating" : "") + ")";
      });
  py::class_<DeviceInfo>(m, "DeviceInfo", "One Vulkan device as vkattn sees it.")
      .def_readonly("index", &DeviceInfo::index, "its index among the Vulkan devices (DeviceOptions.device takes it)")
      .def_readonly("name", &DeviceInfo::name, "the driver-reported device name")
      .def_readonly("type", &DeviceInfo::type, "'discrete', 'integrated', 'virtual', 'cpu' or 'other'")
      .def_readonly("api_version", &DeviceInfo::api_version, "the device's Vulkan version, 'major.minor.patch'")
      .def_readonly("driver", &DeviceInfo::driver, "the driver name and version")
      .def_readonly("limits", &DeviceInfo::limits, "its DeviceLimits as vkattn would plan with them")
      .def_readonly("rejected", &DeviceInfo::rejected, "why vkattn cannot use it; '' when usable")
      .def_readonly("chosen", &DeviceInfo::chosen, "the device Backend('vulkan') would pick")
      .def_readonly("matrix_shapes", &DeviceInfo::matrix_shapes, "VK_KHR_cooperative_matrix's list ([] without the extension)")
      .def_readonly("matrix_note", &DeviceInfo::matrix_note, "why limits.matrix_units is False; '' when it is True")
      .def("__repr__", [](const DeviceInfo& d) {
        return "DeviceInfo(index=" + std::to_string(d.index) + ", name='" + d.name + "', type='" + d.type +
               "', chosen=" + (d.chosen ? "True" : "False") + (d.rejected.empty() ? "" : ", rejected='" + d.rejected + "'") + ")";
      });
}

}  // namespace

void bind_configs(py::module_& m) {
  bind_rope(m);
  bind_attention(m);
  bind_cache_config(m);
  bind_devices(m);
}

}  // namespace vkattn::python
