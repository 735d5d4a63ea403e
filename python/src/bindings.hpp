// The Python module's shared pieces: the objects Python holds (each a C++ handle plus the
// backend that made it), and the conversions every binding file uses (numpy arrays,
// integer lists, enum names, keyword arguments onto config structs).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "vkattn/backend.hpp"
#include "vkattn/command_list.hpp"
#include "vkattn/error.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"

namespace vkattn::python {

namespace py = pybind11;

// A Python Backend's C++ backend, shared with every tensor, cache and list made from it:
// Backend.close() empties it here, and those objects stay usable as the C++ API promises
// (a list still submits; what needs the backend, such as downloading, raises
// InvalidArgument). Read and written only with the GIL held; a call that releases the GIL
// keeps its own copy of the pointer.
struct BackendRef {
  std::shared_ptr<Backend> impl;
  // The backend, or InvalidArgument naming |op| when it has been closed.
  std::shared_ptr<Backend> get(const char* op) const;
};
using BackendPtr = std::shared_ptr<BackendRef>;

struct PyTensor {
  Tensor impl;
  BackendPtr backend;
};
struct PyKvCache {
  KvCache impl;
  BackendPtr backend;
};
struct PyCommandList {
  PyCommandList(CommandList list, BackendPtr b) : impl(std::move(list)), backend(std::move(b)) {}
  PyCommandList(PyCommandList&&) = default;
  PyCommandList& operator=(PyCommandList&&) = default;
  // Releases the GIL while the C++ list waits for its pending submission (a timed-out one
  // may run for long): other Python threads go on meanwhile.
  ~PyCommandList();
  CommandList impl;
  BackendPtr backend;
  bool discarded = false;  // its with-block raised: the C++ list is gone, or going
  // Calls running on the list without the GIL (counted with the GIL held): a list
  // discarded meanwhile is destroyed by the last of them, never under one.
  int active = 0;
  // The list, or InvalidArgument naming |op| once discarded.
  CommandList& get(const char* op);
};

// A TypeError for an argument of the wrong Python type, in InvalidArgument's words:
// "vkattn: <op>: <param> = <repr> (<type>); valid: <valid>".
py::type_error type_error(const std::string& op, const std::string& param, py::handle value, const std::string& valid);

// |e| again under another op and parameter (its value and valid range kept, "::" in them
// read as "."), for a C++ refusal the caller knows by a Python name.
InvalidArgument renamed(const InvalidArgument& e, const std::string& op, const std::string& param);

// DeviceOptions::log for a Python callable (level, message), delivered on the main thread
// (log.cpp); a TypeError for anything else.
LogCallback python_log(py::handle callback);

// An enum from its Python value or its name ("half" for RopeLayout.half); InvalidArgument
// naming |op| and |param| (with the valid names) for another name, a TypeError for a value
// of another type.
template <class E>
E enum_arg(py::handle value, const char* op, const char* param) {
  const py::dict members = py::type::of<E>().attr("__members__");
  auto names = [&] {
    std::string valid;
    for (auto item : members) valid += (valid.empty() ? "'" : ", '") + item.first.cast<std::string>() + "'";
    return valid;
  };
  if (py::isinstance<py::str>(value)) {
    const std::string name = value.cast<std::string>();
    if (members.contains(name)) return members[name.c_str()].template cast<E>();
    throw InvalidArgument(op, param, "'" + name + "'", names());
  }
  if (!py::isinstance<E>(value)) {
    throw type_error(op, param, value, py::str(py::type::of<E>().attr("__name__")).cast<std::string>() + " or one of " + names());
  }
  return value.cast<E>();
}

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// "a Tensor", "an AttentionConfig": |T|'s Python class name with its article.
template <class T>
std::string a_class() {
  const std::string name = py::str(py::type::of<T>().attr("__name__"));
  return (std::string("AEIOU").find(name[0]) == std::string::npos ? "a " : "an ") + name;
}

template <class T>
std::string integer_range() {
  return "[" + std::to_string(std::numeric_limits<T>::min()) + ", " + std::to_string(std::numeric_limits<T>::max()) + "]";
}

// What a Python value for a C++ |T| may be, for messages: "an integer in [0, 4294967295]".
template <class T>
std::string valid_values() {
  if constexpr (std::is_same_v<T, bool>) {
    return "True or False";
  } else if constexpr (std::is_integral_v<T>) {
    return "an integer in " + integer_range<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    return "a number";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "a str";
  } else if constexpr (is_optional<T>::value) {
    return valid_values<typename T::value_type>() + ", or None";
  } else if constexpr (requires { typename T::value_type; }) {  // vectors, arrays
    using V = typename T::value_type;
    std::string count;
    if constexpr (requires { std::tuple_size<T>::value; }) count = std::to_string(std::tuple_size<T>::value) + " ";
    return "a sequence of " + count + (std::is_floating_point_v<V> ? "numbers" : std::is_integral_v<V> ? "integers" : "items");
  } else {
    return a_class<T>();
  }
}

// A Python bool, a numpy one (numpy.bool_; numpy.bool in numpy 2), which is no Python
// bool, or a 0-d array or tensor of bool dtype (numpy's, torch's), which has __index__.
inline bool is_bool(py::handle v) {
  if (py::isinstance<py::bool_>(v)) return true;
  const std::string_view name = Py_TYPE(v.ptr())->tp_name;
  if (name == "numpy.bool_" || name == "numpy.bool") return true;
  if (!py::hasattr(v, "dtype")) return false;
  const std::string dtype = py::str(v.attr("dtype"));
  return dtype == "bool" || dtype == "torch.bool";
}

// Vectors and arrays of numbers (a config's sinks, a shape), converted element by element.
template <class T>
inline constexpr bool is_number_sequence = [] {
  if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
    return std::is_arithmetic_v<typename T::value_type>;
  } else {
    return false;
  }
}();

// |value| as a |T| (a config field, a keyword argument): an integer outside T's range, or a
// number past float's for a float, is InvalidArgument naming |owner| and |param|; a value
// of another type (a float or a bool for an integer, a bool for a number, anything but
// True or False for a bool: pybind11 would read None as False) a TypeError naming them.
// Sequences are converted element by element, each named param[i].
template <class T>
T value_arg(py::handle value, const char* owner, const char* param) {
  if constexpr (is_optional<T>::value) {
    if (value.is_none()) return std::nullopt;
    try {
      return value_arg<typename T::value_type>(value, owner, param);
    } catch (const py::type_error&) {
      throw type_error(owner, param, value, valid_values<T>());  // ", or None" too
    }
  } else {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // A bool is no count (pybind11 would take True as 1; numpy 1.x's bool has __index__
      // too), a float no integer.
      if (is_bool(value) || !py::hasattr(value, "__index__")) {
        throw type_error(owner, param, value, valid_values<T>());
      }
      py::int_ i;
      try {  // an array of several values, a float tensor: their __index__ raises
        i = py::int_(py::reinterpret_borrow<py::object>(value).attr("__index__")());
      } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_TypeError) && !e.matches(PyExc_ValueError)) throw;
        throw type_error(owner, param, value, valid_values<T>());
      }
      if (i < py::int_(std::numeric_limits<T>::min()) || i > py::int_(std::numeric_limits<T>::max())) {
        throw InvalidArgument(owner, param, py::str(static_cast<py::handle>(i)).cast<std::string>(), integer_range<T>());
      }
      return i.cast<T>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!is_bool(value)) throw type_error(owner, param, value, valid_values<T>());
      try {
        return value.cast<bool>();
      } catch (const py::cast_error&) {  // a bool array of several values
        throw type_error(owner, param, value, valid_values<T>());
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (is_bool(value)) throw type_error(owner, param, value, valid_values<T>());
      double x = 0;
      try {
        x = value.cast<double>();
      } catch (const py::cast_error&) {
        throw type_error(owner, param, value, valid_values<T>());
      }
      if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<T>::max()) {
        throw InvalidArgument(owner, param, py::str(value).cast<std::string>(), "a number within float's range (|x| <= 3.4e38)");
      }
      return static_cast<T>(x);
    } else if constexpr (is_number_sequence<T>) {
      if (py::isinstance<py::str>(value) || py::isinstance<py::bytes>(value) || !py::isinstance<py::sequence>(value)) {
        throw type_error(owner, param, value, valid_values<T>());
      }
      const auto seq = py::reinterpret_borrow<py::sequence>(value);
      const std::size_t n = py::len(seq);
      T out{};
      if constexpr (requires { std::tuple_size<T>::value; }) {
        if (n != std::tuple_size<T>::value) throw type_error(owner, param, value, valid_values<T>());
      } else {
        out.reserve(n);
      }
      for (std::size_t i = 0; i < n; ++i) {
        const std::string element = std::string(param) + "[" + std::to_string(i) + "]";
        auto v = value_arg<typename T::value_type>(seq[i], owner, element.c_str());
        if constexpr (requires { std::tuple_size<T>::value; }) {
          out[i] = v;
        } else {
          out.push_back(v);
        }
      }
      return out;
    } else {
      try {
        return value.cast<T>();
      } catch (const py::cast_error&) {
        throw type_error(owner, param, value, valid_values<T>());
      } catch (const py::reference_cast_error&) {  // None for a class: its own text, else
        throw type_error(owner, param, value, valid_values<T>());
      }
    }
  }
}

// An integer argument of a method or function, converted inside it by as<T>() so that its
// errors name the call and the parameter as value_arg's do (pybind11's integer casters
// give a TypeError listing the signature, even for a -1 where an unsigned goes). Shown as
// int in signatures; numpy integers are integers.
struct IntArg {
  py::object value;
  template <class T>
  T as(const char* op, const char* param) const {
    return value_arg<T>(value, op, param);
  }
};

// A config field as a property whose setter converts with value_arg (names the class and
// the field in its errors); the getter returns the field itself, as def_readwrite does, so
// that config.yarn.beta_fast = 64 changes config (a list field, which pybind11 turns into a
// new Python list, reads as a copy: docs/python.md says to assign a new list).
template <class C, class T, class Class>
void field(Class& cls, const char* name, T C::*member, const char* doc = "") {
  const auto owner = std::make_shared<std::string>(py::str(cls.attr("__name__")));
  const py::cpp_function get([member](const C& c) -> const T& { return c.*member; }, py::is_method(cls));
  const py::cpp_function set([member, owner, name](C& c, py::handle v) { c.*member = value_arg<T>(v, owner->c_str(), name); },
                             py::is_method(cls));
  cls.def_property(name, get, set, py::return_value_policy::reference_internal, doc);
}

// A property of a config class holding an enum, settable from the enum or its name.
template <class E, class C, class Class>
void enum_property(Class& cls, const char* name, E C::*member, const char* doc) {
  const auto owner = std::make_shared<std::string>(py::str(cls.attr("__name__")));
  cls.def_property(
      name, [member](const C& c) { return c.*member; },
      [member, owner, name](C& c, py::handle v) { c.*member = enum_arg<E>(v, owner->c_str(), name); }, doc);
}

// A copy of |config| (a Config object or None for the defaults) with each keyword argument
// set as the field of that name; an unknown name is a TypeError, as a misspelt keyword
// argument of a Python function is.
template <class Config>
Config config_arg(py::handle config, const py::dict& fields, const char* op) {
  if (!config.is_none() && !py::isinstance<Config>(config)) {
    throw type_error(op, "config", config, a_class<Config>() + " or None");
  }
  py::object c = py::cast(config.is_none() ? Config{} : config.cast<Config>());
  for (auto item : fields) {
    const std::string name = py::str(item.first);
    if (name.empty() || name[0] == '_' || !py::hasattr(c, name.c_str())) {
      throw py::type_error(std::string(op) + "() got an unexpected keyword argument '" + name + "'");
    }
    c.attr(name.c_str()) = item.second;
  }
  return c.cast<Config>();
}

// |data| as a numpy array: arrays as they are, torch tensors through .numpy() (zero-copy
// for CPU tensors; a dtype numpy lacks, such as bfloat16, is InvalidArgument naming |op|
// and |param|), anything else through numpy.asarray.
py::array as_array(py::handle data, const char* op, const char* param);
// The shapes integers may come in: 1-D; [n_tokens, 3] only (M-RoPE's t, h, w per token: a
// flat array could as well be the three sections one after another, as transformers'
// position_ids [3, batch, n_tokens] are, so rope refuses it); either (set_tokens, whose
// ops each take what they need).
enum class Rows { one, three, either };
// Integers (positions, sequence ids): an integer array or sequence shaped as |rows| says,
// flattened, each value fitting int32 (the ops check their own ranges); None is empty.
// |n_tokens| (not 0): how many rows of three there must be.
std::vector<std::int32_t> int32_list(py::handle data, const char* op, const char* param, Rows rows = Rows::one,
                                     std::size_t n_tokens = 0);
// A DType from a DType, a name ("f16", "float16", ...) or a numpy dtype.
DType dtype_arg(py::handle value, const char* op, const char* param);
// The Python shape tuple of a tensor.
py::tuple shape_tuple(const Shape& shape);

// Copies |data| into |tensor| (same shape; float32 or float16 for float tensors, int32 for
// i32) / a new numpy array of the tensor (float32; float16 for f16; int32 for i32).
void upload(Backend& backend, Tensor& tensor, py::handle data, const char* op);
py::array download(Backend& backend, const Tensor& tensor);

void bind_errors(py::module_& m);
void bind_configs(py::module_& m);
// Tensor and KvCache, then CommandList, then Backend, whose methods take and return them:
// a class bound later would show as its C++ name in Backend's signatures (help()).
void bind_objects(py::module_& m);
void bind_commands(py::module_& m);
void bind_backend(py::module_& m);

}  // namespace vkattn::python

namespace pybind11::detail {
template <>
struct type_caster<vkattn::python::IntArg> {
  PYBIND11_TYPE_CASTER(vkattn::python::IntArg, const_name("int"));
  bool load(handle src, bool) {
    value.value = reinterpret_borrow<object>(src);
    return true;
  }
  static handle cast(const vkattn::python::IntArg& v, return_value_policy, handle) { return v.value.inc_ref(); }
};
}  // namespace pybind11::detail
