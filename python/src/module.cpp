// vkattn._vkattn: the C++ API for Python. This file: the module, its enums, its errors
// (every C++ exception becomes a Python one) and the free functions; configs.cpp the
// config classes, objects.cpp Backend, Tensor and KvCache, commands.cpp CommandList,
// arrays.cpp the numpy conversions. The package vkattn (python/vkattn/__init__.py)
// re-exports it all.
#include <Python.h>

#include <array>
#include <utility>

#include "bindings.hpp"
#include "vkattn/version.hpp"

namespace vkattn::python {
namespace {

// The exception classes, created once at import and alive as long as the interpreter.
PyObject* invalid_argument_type = nullptr;
std::array<PyObject*, 6> error_types{};  // by ErrorCode

PyObject* new_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("vkattn.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(type));
  return type;
}

// Raises |type| with |message|, and |attrs| set on the exception object.
void raise(PyObject* type, const std::string& message, std::initializer_list<std::pair<const char*, py::object>> attrs) {
  // Bytes that are not UTF-8 (a path's) replaced, not a UnicodeDecodeError in their place.
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
  if (!text) throw py::error_already_set();
  py::object error = py::reinterpret_borrow<py::object>(type)(py::reinterpret_steal<py::object>(text));
  for (const auto& [name, value] : attrs) error.attr(name) = value;
  PyErr_SetObject(type, error.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  py::enum_<ErrorCode>(m, "ErrorCode", "Why a vkattn.Error was raised (vkattn::ErrorCode).")
      .value("vulkan_call_failed", ErrorCode::vulkan_call_failed)
      .value("no_device", ErrorCode::no_device)
      .value("device_lost", ErrorCode::device_lost)
      .value("out_of_memory", ErrorCode::out_of_memory)
      .value("timeout", ErrorCode::timeout)
      .value("unsupported", ErrorCode::unsupported);

  invalid_argument_type =
      new_exception(m, "InvalidArgument", PyExc_ValueError,
                    "A parameter outside its valid range (vkattn::InvalidArgument); raised before anything is\n"
                    "recorded. str() reads 'vkattn: <op>: <param> = <value>; valid: <range>'; .param names the\n"
                    "parameter.");
  PyObject* error = new_exception(m, "Error", PyExc_RuntimeError,
                                  "A failure of the device, the driver or memory (vkattn::Error). Attributes: code\n"
                                  "(vkattn.ErrorCode), vk_result (the VkResult, 0 when none), call (the failing call),\n"
                                  "op (the vkattn operation), message (without op, call and code). One subclass per code.");
  const py::tuple oom_bases = py::make_tuple(py::handle(error), py::handle(PyExc_MemoryError));
  error_types = {
      new_exception(m, "VulkanError", error, "A Vulkan call failed; vk_result says how."),
      new_exception(m, "NoDeviceError", error, "No usable Vulkan device; the message lists each device's reason."),
      new_exception(m, "DeviceLostError", error,
                    "The device was lost: every later call on that backend fails so; make a new Backend."),
      new_exception(m, "OutOfMemoryError", oom_bases.ptr(),
                    "A device heap or host allocation cannot hold a request, or a size exceeds a\n"
                    "device limit; the backend stays usable."),
      new_exception(m, "DeviceTimeoutError", error, "A submission did not finish within submit_timeout_ms; it keeps running."),
      new_exception(m, "UnsupportedError", error, "The device or installation lacks what was asked for."),
  };

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      // what() as a std::string: a value quoting a Python string may hold a NUL, where
      // what()'s C string would end.
      raise(invalid_argument_type, "vkattn: " + e.op() + ": " + e.message(),
            {{"param", py::str(e.param())}, {"op", py::str(e.op())}});
    } catch (const Error& e) {
      const auto code = static_cast<std::size_t>(e.code());
      raise(code < error_types.size() ? error_types[code] : error_types[0], e.what(),
            {{"code", py::cast(e.code())},
             {"vk_result", py::int_(e.vk_result())},
             {"call", py::str(e.call())},
             {"op", py::str(e.op())},
             {"message", py::str(e.message())}});
    } catch (const py::cast_error& e) {
      // An argument vkattn converts itself (out=, a config dict's field, a keyword given
      // an enum's value) of the wrong type: pybind11 would make it a RuntimeError, which
      // handlers of device errors (vkattn.Error is one) would catch.
      PyErr_SetString(PyExc_TypeError, e.what());
    }
  });
}

namespace {

void bind_enums(py::module_& m) {
  py::enum_<DType>(m, "DType", "Element types; arguments also take the names ('f16') and numpy dtypes.")
      .value("f32", DType::f32, "4 bytes")
      .value("f16", DType::f16, "IEEE half, two per 32-bit word")
      .value("i32", DType::i32, "positions, sequence ids")
      .value("q8_0", DType::q8_0, "K and V only: ggml's q8_0 blocks of 32")
      .value("q4_0", DType::q4_0, "K and V only: ggml's q4_0 blocks of 32");
  py::enum_<BackendKind>(m, "BackendKind").value("cpu", BackendKind::cpu).value("vulkan", BackendKind::vulkan);
  py::enum_<RopeLayout>(m, "RopeLayout", "Which dims RoPE pairs.")
      .value("interleaved", RopeLayout::interleaved, "(x[2i], x[2i+1]): RoFormer, Meta's Llama, GPT-J")
      .value("half", RopeLayout::half, "(x[i], x[i + d/2]): rotate_half, Hugging Face");
  py::enum_<RopeScaling>(m, "RopeScaling", "How RoPE frequencies are rescaled (vkattn::RopeScaling).")
      .value("none", RopeScaling::none)
      .value("linear", RopeScaling::linear)
      .value("ntk", RopeScaling::ntk)
      .value("dynamic_ntk", RopeScaling::dynamic_ntk)
      .value("yarn", RopeScaling::yarn)
      .value("llama3", RopeScaling::llama3)
      .value("factors", RopeScaling::factors);
  py::enum_<AttentionPath>(m, "AttentionPath", "Which kernels CommandList.attention runs.")
      .value("automatic", AttentionPath::automatic)
      .value("fused", AttentionPath::fused)
      .value("three_stages", AttentionPath::three_stages);
  py::enum_<AttentionPrecision>(m, "AttentionPrecision",
                                "How precisely CommandList.attention computes its products (docs/attention.md).")
      .value("f32", AttentionPrecision::f32)
      .value("f16_products", AttentionPrecision::f16_products);
  py::enum_<MRopeLayout>(m, "MRopeLayout", "How M-RoPE assigns rotary pairs to t, h and w.")
      .value("contiguous", MRopeLayout::contiguous, "sections one after another (Qwen2-VL, Qwen2.5-VL)")
      .value("interleaved", MRopeLayout::interleaved, "h and w every third pair (Qwen3-VL, Qwen3.5)");
  py::enum_<WindowType>(m, "WindowType", "Which way AttentionConfig.window looks.")
      .value("trailing", WindowType::trailing, "keys with pos_t - pos_j < window")
      .value("symmetric", WindowType::symmetric, "keys with |pos_t - pos_j| <= window // 2 (encoders)");
  py::enum_<SoftcapOrder>(m, "SoftcapOrder")
      .value("scale_then_cap", SoftcapOrder::scale_then_cap)
      .value("cap_then_scale", SoftcapOrder::cap_then_scale);
  py::enum_<KvRope>(m, "KvRope", "How cached keys meet RoPE.")
      .value("stored", KvRope::stored, "appended rotated at absolute positions (Mistral)")
      .value("on_read", KvRope::on_read, "rotated by in-cache position as attention reads them (StreamingLLM)");
  py::enum_<KernelShape>(m, "KernelShape")
      .value("automatic", KernelShape::automatic)
      .value("cpu", KernelShape::cpu)
      .value("gpu", KernelShape::gpu);
  py::enum_<MatrixUnits>(m, "MatrixUnits", "Whether f16_products attention uses the device's matrix units (tensor cores).")
      .value("automatic", MatrixUnits::automatic, "where the device has them and is on the allowlist")
      .value("off", MatrixUnits::off)
      .value("on", MatrixUnits::on, "wherever the device has them, any vendor")
      .value("standin", MatrixUnits::standin, "the matrix kernels in plain GLSL on any device (tests)");
  py::enum_<LogLevel>(m, "LogLevel")
      .value("off", LogLevel::off)
      .value("error", LogLevel::error)
      .value("warning", LogLevel::warning)
      .value("info", LogLevel::info);
}

}  // namespace
}  // namespace vkattn::python

PYBIND11_MODULE(_vkattn, m) {
  using namespace vkattn::python;
  m.doc() = "vkattn's C++ API (import the package vkattn, which re-exports this module).";
  // Classes take their __module__ from the module's name when they are bound: name them
  // after the package users import, so that help(), reprs and signatures say vkattn.Tensor.
  const py::object own_name = m.attr("__name__");
  m.attr("__name__") = "vkattn";
  bind_errors(m);
  bind_enums(m);
  bind_configs(m);
  bind_objects(m);
  bind_commands(m);
  bind_backend(m);
  // Made only by the library (Backend.tensor, kv_cache, commands): Cls() and Cls.__new__(Cls)
  // are a TypeError, where pybind11 would make an object whose C++ value was never made,
  // and crash when it is used. (Its own instances come from tp_alloc, not tp_new.)
  for (const char* name : {"Tensor", "KvCache", "CommandList"}) {
    auto* type = reinterpret_cast<PyTypeObject*>(m.attr(name).ptr());
    type->tp_new = nullptr;
    PyType_Modified(type);
  }
  m.attr("__version__") = vkattn::version();
  m.def(
      "alibi_slopes",
      [](const IntArg& n_heads) {
        std::vector<float> s = vkattn::alibi_slopes(n_heads.as<std::size_t>("alibi_slopes", "n_heads"));
        return py::array_t<float>(static_cast<py::ssize_t>(s.size()), s.data());
      },
      py::arg("n_heads"), "The standard ALiBi slopes for n_heads heads (float32 array).");
  m.attr("__name__") = own_name;
}
