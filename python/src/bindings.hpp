// The Python module's shared pieces: the objects Python holds (each a C++ handle plus the
// backend that made it), and the conversions every binding file uses (numpy arrays,
// integer lists, enum names, keyword arguments onto config structs).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vkattn/vkattn.hpp"

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
  CommandList impl;
  BackendPtr backend;
};

// An enum from its Python value or its name ("half" for RopeLayout.half); InvalidArgument
// naming |op| and |param| (with the valid names) otherwise.
template <class E>
E enum_arg(py::handle value, const char* op, const char* param) {
  if (py::isinstance<py::str>(value)) {
    const py::dict members = py::type::of<E>().attr("__members__");
    const std::string name = value.cast<std::string>();
    if (members.contains(name)) return members[name.c_str()].template cast<E>();
    std::string valid;
    for (auto item : members) valid += (valid.empty() ? "'" : ", '") + item.first.cast<std::string>() + "'";
    throw InvalidArgument(op, param, "'" + name + "'", valid);
  }
  return value.cast<E>();
}

// A property of a config class |owner| holding an enum, settable from the enum or its name.
template <class E, class C, class Class>
void enum_property(Class& cls, const char* owner, const char* name, E C::*field, const char* doc) {
  cls.def_property(
      name, [field](const C& c) { return c.*field; },
      [field, owner, name](C& c, py::handle v) { c.*field = enum_arg<E>(v, owner, name); }, doc);
}

// A copy of |config| (a Config object or None for the defaults) with each keyword argument
// set as the field of that name; an unknown name is a TypeError, as a misspelt keyword
// argument of a Python function is.
template <class Config>
Config config_arg(py::handle config, const py::dict& fields, const char* op) {
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
// for CPU tensors), anything else through numpy.asarray.
py::array as_array(py::handle data);
// The shapes integers may come in: 1-D; [n_tokens, 3] only (M-RoPE's t, h, w per token: a
// flat array could as well be the three sections one after another, as transformers'
// position_ids [3, batch, n_tokens] are, so rope refuses it); either (set_tokens, whose
// ops each take what they need).
enum class Rows { one, three, either };
// Integers (positions, sequence ids): an integer array or sequence shaped as |rows| says,
// flattened, each value fitting int32 (the ops check their own ranges); None is empty.
std::vector<std::int32_t> int32_list(py::handle data, const char* op, const char* param, Rows rows = Rows::one);
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
void bind_objects(py::module_& m);
void bind_commands(py::module_& m);

}  // namespace vkattn::python
