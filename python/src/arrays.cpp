// numpy <-> tensors. Uploads take C-contiguous float32 or float16 arrays for float tensors
// and int32 arrays for i32 tensors, of the tensor's exact shape; other layouts are copied
// into a contiguous array first (an upload copies anyway), other dtypes refused: a silent
// float64 -> float32 cast would hide where precision went. Downloads return new arrays.
#include <cstring>
#include <limits>

#include "bindings.hpp"

namespace vkattn::python {
namespace {

py::module_ numpy() { return py::module_::import("numpy"); }

std::string dtype_name(const py::array& a) { return py::str(static_cast<py::handle>(a.dtype())).cast<std::string>(); }

std::string shape_string(const py::array& a) {
  return py::repr(py::tuple(py::cast(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim())))).cast<std::string>();
}

}  // namespace

py::tuple shape_tuple(const Shape& shape) { return py::tuple(py::cast(shape)); }

InvalidArgument renamed(const InvalidArgument& e, const std::string& op, const std::string& param) {
  const std::string& m = e.message();  // "param = value; valid: ..."
  const std::size_t value = e.param().size() + 3, valid = m.find("; valid: ", value);
  if (m.compare(0, value, e.param() + " = ") != 0 || valid == std::string::npos) return e;
  const auto python = [](std::string_view s) {
    std::string out;
    for (std::size_t at = 0; at < s.size(); ++at) {
      out += s[at];
      if (s[at] == ':' && at + 1 < s.size() && s[at + 1] == ':') out.back() = '.', ++at;
    }
    return out;
  };
  const std::string_view text(m);
  return InvalidArgument(op, param, python(text.substr(value, valid - value)), python(text.substr(valid + 9)));
}

py::type_error type_error(const std::string& op, const std::string& param, py::handle value, const std::string& valid) {
  const std::string type = py::str(py::type::of(value).attr("__name__"));
  return py::type_error("vkattn: " + op + ": " + param + " = " + py::repr(value).cast<std::string>() + " (" + type +
                        "); valid: " + valid);
}

py::array as_array(py::handle data, const char* op, const char* param) {
  if (py::isinstance<py::array>(data)) {
    // A masked array's mask would be dropped and its hidden values used: refuse one that
    // hides any.
    const py::object ma = numpy().attr("ma");
    if (ma.attr("isMaskedArray")(data).cast<bool>()) {
      const auto hidden = ma.attr("count_masked")(data).cast<std::size_t>();
      if (hidden != 0) {
        throw InvalidArgument(op, std::string(param) + ".mask", std::to_string(hidden) + " masked elements",
                              "none (fill them first, e.g. a.filled(0))");
      }
      return ma.attr("getdata")(data);
    }
    return py::reinterpret_borrow<py::array>(data);
  }
  // A torch tensor: .numpy() shares a CPU tensor's memory; detach() first so that tensors
  // requiring grad convert too. A CUDA tensor raises torch's own TypeError.
  const py::object type = py::type::of(data);
  if (py::str(type.attr("__module__")).cast<std::string>().starts_with("torch") && py::hasattr(data, "numpy")) {
    try {
      return data.attr("detach")().attr("numpy")();
    } catch (const py::error_already_set& e) {
      // bfloat16 (models' usual dtype) and the other dtypes numpy has no type for.
      const std::string dtype = py::str(data.attr("dtype"));
      // (A CUDA or a sparse tensor: torch's own message says what to do.)
      if (!e.matches(PyExc_TypeError) || data.attr("device").attr("type").cast<std::string>() != "cpu" ||
          py::str(data.attr("layout")).cast<std::string>() != "torch.strided") {
        throw;
      }
      throw InvalidArgument(op, std::string(param) + ".dtype", dtype,
                            "a dtype numpy has: float32, float16 or int32 (cast first, e.g. t.float())");
    }
  }
  return numpy().attr("asarray")(data);
}

std::vector<std::int32_t> int32_list(py::handle data, const char* op, const char* param, Rows rows, std::size_t n_tokens) {
  if (data.is_none()) return {};
  const py::array given = as_array(data, op, param);
  const bool triples = given.ndim() == 2 && given.shape(1) == 3;  // M-RoPE's (t, h, w) rows
  // Rows of three are one token each: never n_tokens / 3 tokens' (t, h, w), which the
  // flattened array would otherwise read as n_tokens positions.
  if (triples && n_tokens != 0 && static_cast<std::size_t>(given.shape(0)) != n_tokens) {
    const std::string n = std::to_string(n_tokens);
    throw InvalidArgument(op, std::string(param) + ".shape", shape_string(given),
                          "(" + n + ",) or (" + n + ", 3): the list's n_tokens, or (t, h, w) for each");
  }
  const py::array a = rows != Rows::one && triples ? given.attr("reshape")(-1).cast<py::array>() : given;
  // An empty Python sequence is none (numpy makes [] float64); an empty array is checked
  // as any other, so that a float or 2-D one is not read as none.
  if (a.size() == 0 && !py::isinstance<py::array>(data)) return {};
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    // A Python sequence holding an integer past int64, which numpy made float64 or object:
    // name that integer, not the dtype the caller never chose.
    if (!py::isinstance<py::array>(data) && (kind == 'f' || kind == 'O')) {
      const py::list items = numpy().attr("asarray")(data, "object").attr("ravel")().attr("tolist")();
      for (std::size_t i = 0; i < items.size(); ++i) {
        const py::handle v = items[i];
        if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v)) break;
        if (v < py::int_(std::numeric_limits<std::int32_t>::min()) || v > py::int_(std::numeric_limits<std::int32_t>::max())) {
          throw InvalidArgument(op, std::string(param) + "[" + std::to_string(i) + "]", py::str(v).cast<std::string>(),
                                "[0, 2^31 - 1]");
        }
      }
    }
    throw InvalidArgument(op, std::string(param) + ".dtype", dtype_name(a), "integers");
  }
  if (a.ndim() != 1 || (rows == Rows::three && !triples)) {
    throw InvalidArgument(op, std::string(param) + ".shape", shape_string(given),
                          rows == Rows::one     ? "1-D"
                          : rows == Rows::three ? "[n_tokens, 3] with mrope (t, h, w per token)"
                                                : "1-D, or [n_tokens, 3]");
  }
  // Values past int32 would wrap in the conversion: name the first one here (the ops
  // check the rest of their ranges themselves).
  const py::object np = numpy();
  const py::object outside = np.attr("logical_or")(np.attr("less")(a, std::numeric_limits<std::int32_t>::min()),
                                                   np.attr("greater")(a, std::numeric_limits<std::int32_t>::max()));
  if (outside.attr("any")().cast<bool>()) {
    const auto i = np.attr("argmax")(outside).cast<std::size_t>();
    throw InvalidArgument(op, std::string(param) + "[" + std::to_string(i) + "]",
                          py::str(a.attr("__getitem__")(i)).cast<std::string>(), "[0, 2^31 - 1]");
  }
  if (a.size() == 0) return {};
  const auto values = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>::ensure(a);
  std::vector<std::int32_t> out(static_cast<std::size_t>(values.size()));
  std::memcpy(out.data(), values.data(), out.size() * sizeof out[0]);  // the array's data may be unaligned
  return out;
}

DType dtype_arg(py::handle value, const char* op, const char* param) {
  // numpy reads None as float64, which the caller never wrote.
  if (value.is_none()) throw type_error(op, param, value, "f32, f16, i32, q8_0, q4_0 (or numpy float32, float16, int32)");
  if (py::isinstance<py::str>(value)) {
    const std::string s = value.cast<std::string>();
    if (s == "float32") return DType::f32;
    if (s == "float16") return DType::f16;
    if (s == "int32") return DType::i32;
    return enum_arg<DType>(value, op, param);
  }
  if (py::isinstance<DType>(value)) return value.cast<DType>();
  py::dtype d;
  try {
    d = py::dtype::from_args(py::reinterpret_borrow<py::object>(value));
  } catch (py::error_already_set& e) {  // an int, another enum: no dtype numpy knows
    if (!e.matches(PyExc_TypeError)) throw;
    throw type_error(op, param, value, "f32, f16, i32, q8_0, q4_0 (or numpy float32, float16, int32)");
  }
  if (d.equal(py::dtype::of<float>())) return DType::f32;
  if (d.equal(py::dtype("float16"))) return DType::f16;
  if (d.equal(py::dtype::of<std::int32_t>())) return DType::i32;
  throw InvalidArgument(op, param, py::str(static_cast<py::handle>(d)).cast<std::string>(),
                        "f32, f16, i32, q8_0, q4_0 (or numpy float32, float16, int32)");
}

void upload(Backend& backend, Tensor& tensor, py::handle data, const char* op) {
  py::array a = as_array(data, op, "data");
  const Shape& shape = tensor.shape();
  const bool same_shape = static_cast<std::size_t>(a.ndim()) == shape.size() &&
                          std::equal(shape.begin(), shape.end(), a.shape(),
                                     [](std::size_t s, py::ssize_t n) { return static_cast<py::ssize_t>(s) == n; });
  if (!same_shape) {
    throw InvalidArgument(op, "data.shape", shape_string(a),
                          py::repr(shape_tuple(shape)).cast<std::string>() + ", the tensor's shape");
  }
  const DType dtype = tensor.dtype();
  const py::dtype f32 = py::dtype::of<float>(), f16("float16"), i32 = py::dtype::of<std::int32_t>();
  const bool is_f32 = a.dtype().equal(f32), is_f16 = a.dtype().equal(f16), is_i32 = a.dtype().equal(i32);
  if (dtype == DType::i32 ? !is_i32 : !(is_f32 || is_f16)) {
    throw InvalidArgument(op, "data.dtype", dtype_name(a),
                          dtype == DType::i32 ? "int32 for an i32 tensor"
                                              : std::string("float32 or float16 for an ") + to_string(dtype) +
                                                    " tensor (cast first, e.g. a.astype(numpy.float32))");
  }
  // Contiguous and aligned (np.frombuffer at an odd offset is neither copied nor aligned by
  // ascontiguousarray): the backends read it as float and int32 elements.
  a = numpy().attr("require")(a, py::none(), "CA");
  const auto n = static_cast<std::size_t>(a.size());
  if (is_i32) {
    std::span<const std::int32_t> v(static_cast<const std::int32_t*>(a.data()), n);
    py::gil_scoped_release nogil;
    backend.upload(tensor, v);
  } else if (is_f16 && dtype == DType::f16) {
    // Halves are the storage itself, two per 32-bit word, low first: no conversion.
    std::vector<std::uint8_t> bytes(tensor.bytes(), 0);
    std::memcpy(bytes.data(), a.data(), n * 2);
    py::gil_scoped_release nogil;
    backend.upload_raw(tensor, bytes);
  } else {
    if (is_f16) a = a.attr("astype")(f32);  // exact
    std::span<const float> v(static_cast<const float*>(a.data()), n);
    py::gil_scoped_release nogil;
    backend.upload(tensor, v);
  }
}

namespace {

// A numpy array over |values|, which it then owns.
template <class T, class Storage>
py::array owning_array(Storage&& values, const Shape& shape, const py::dtype& dtype) {
  auto* held = new Storage(std::move(values));
  py::capsule owner(held, [](void* p) { delete static_cast<Storage*>(p); });
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array(dtype, dims, {}, held->data(), owner);
}

}  // namespace

py::array download(Backend& backend, const Tensor& tensor) {
  const Shape& shape = tensor.shape();
  switch (tensor.dtype()) {
    case DType::i32: {
      std::vector<std::int32_t> v;
      {
        py::gil_scoped_release nogil;
        v = backend.download_i32(tensor);
      }
      return owning_array<std::int32_t>(std::move(v), shape, py::dtype::of<std::int32_t>());
    }
    case DType::f16: {
      std::vector<std::uint8_t> raw;
      {
        py::gil_scoped_release nogil;
        raw = backend.download_raw(tensor);
      }
      return owning_array<std::uint8_t>(std::move(raw), shape, py::dtype("float16"));
    }
    default: {
      std::vector<float> v;
      {
        py::gil_scoped_release nogil;
        v = backend.download(tensor);
      }
      return owning_array<float>(std::move(v), shape, py::dtype::of<float>());
    }
  }
}

}  // namespace vkattn::python
