// Backend, Tensor and KvCache. A tensor, cache or list holds the BackendRef of the backend
// that made it, so Python's reference counting keeps the backend alive as long as any of
// them; Backend.close() (or leaving a `with Backend(...)` block) ends it earlier, and what
// it made then behaves as the C++ API promises for objects that outlive their backend.
#include "bindings.hpp"

namespace vkattn::python {

std::shared_ptr<Backend> BackendRef::get(const char* op) const {
  if (!impl) throw InvalidArgument(op, "backend", "closed", "an open Backend (close() was called on it)");
  return impl;
}

namespace {

DeviceOptions device_options(py::handle device, py::handle validation, const py::kwargs& kw) {
  DeviceOptions o;
  if (!device.is_none()) {  // an index (numpy's integers too; not a negative one, which
                            // would be read as a name) or a name
    if (py::isinstance<py::str>(device)) {
      o.device = device.cast<std::string>();
    } else if (!is_bool(device) && py::hasattr(device, "__index__")) {
      o.device = std::to_string(value_arg<std::uint32_t>(device, "Backend", "device"));
    } else {
      throw type_error("Backend", "device", device, "an index (int), a name substring (str), or None");
    }
  }
  o.validation = value_arg<std::optional<bool>>(validation, "Backend", "validation");
  for (auto item : kw) {
    const std::string name = py::str(item.first);
    const py::handle v = item.second;
    if (name == "kernels") {
      if (!v.is_none()) o.kernels = enum_arg<KernelShape>(v, "Backend", "kernels");
    } else if (name == "force_staging") {
      o.force_staging = value_arg<bool>(v, "Backend", "force_staging");
    } else if (name == "pipeline_cache_dir") {
      // A path as the file system spells it: os.fsencode keeps a name that is not UTF-8
      // (str with surrogate escapes, or bytes) as its bytes.
      if (!v.is_none() && !py::isinstance<py::str>(v) && !py::isinstance<py::bytes>(v) && !py::hasattr(v, "__fspath__")) {
        throw type_error("Backend", "pipeline_cache_dir", v, "a path (str, bytes or os.PathLike), or None");
      }
      if (!v.is_none()) o.pipeline_cache_dir = py::module_::import("os").attr("fsencode")(v).cast<std::string>();
    } else if (name == "submit_timeout_ms") {
      o.submit_timeout_ms = value_arg<std::uint32_t>(v, "Backend", "submit_timeout_ms");
    } else if (name == "log_level") {
      if (!v.is_none()) o.log_level = enum_arg<LogLevel>(v, "Backend", "log_level");
    } else if (name == "log") {
      if (!v.is_none()) o.log = python_log(v);
    } else if (name == "matrix_units") {
      if (!v.is_none()) o.matrix_units = enum_arg<MatrixUnits>(v, "Backend", "matrix_units");
    } else if (name == "cap_limits") {
      o.cap_limits = value_arg<std::optional<DeviceLimits>>(v, "Backend", "cap_limits");
    } else {
      throw py::type_error("Backend() got an unexpected keyword argument '" + name + "'");
    }
  }
  return o;
}

// A refusal of DeviceOptions (check_device_options) named by the keyword the caller gave.
template <class F>
auto with_keywords(const char* op, F&& f) {
  try {
    return f();
  } catch (const InvalidArgument& e) {
    if (e.param().rfind("options.", 0) != 0) throw;
    throw renamed(e, op, e.param().substr(8));
  }
}

PyTensor new_tensor(const BackendPtr& ref, const Shape& shape, DType dtype, const char* op) {
  const std::shared_ptr<Backend> b = ref->get(op);
  py::gil_scoped_release nogil;  // a large tensor takes a while to allocate and clear
  return PyTensor{b->tensor(shape, dtype), ref};
}

}  // namespace

void bind_backend(py::module_& m) {
  // Its methods take the holder: a Backend that Backend.__new__ made without __init__ holds
  // none, and casting to the holder is then a TypeError, where a reference would read an
  // object never made.
  py::class_<BackendRef, BackendPtr>(
      m, "Backend",
      "A device (kind 'vulkan') or the CPU reference (kind 'cpu') that makes tensors, KV caches\n"
      "and command lists. Backend(kind='vulkan', device=None, validation=None, *, kernels=None,\n"
      "force_staging=False, pipeline_cache_dir=None, submit_timeout_ms=60000, log_level=None,\n"
      "log=None, cap_limits=None, matrix_units=None): the fields of vkattn::DeviceOptions. device: an\n"
      "index or a name substring (default $VKATTN_DEVICE, else the best device). log(level, message):\n"
      "called on the main thread, in order, soon after each message (default: stderr). A context\n"
      "manager: close() at exit.")
      .def(py::init([](py::handle kind, py::handle device, py::handle validation, const py::kwargs& kw) {
             const BackendKind k = enum_arg<BackendKind>(kind, "Backend", "kind");
             const DeviceOptions options = device_options(device, validation, kw);
             std::shared_ptr<Backend> b;
             {
               py::gil_scoped_release nogil;
               b = with_keywords("Backend", [&] { return make_backend(k, options); });
             }
             return std::make_shared<BackendRef>(BackendRef{std::move(b)});
           }),
           py::arg("kind") = "vulkan", py::arg("device") = py::none(), py::arg("validation") = py::none())
      .def_property_readonly(
          "kind", [](const BackendPtr& r) { return r->get("kind")->kind(); }, "the BackendKind: cpu or vulkan")
      .def_property_readonly(
          "device_name", [](const BackendPtr& r) { return r->get("device_name")->device_name(); },
          "the device's name (\"cpu reference\" for the CPU backend)")
      .def_property_readonly(
          "limits", [](const BackendPtr& r) { return r->get("limits")->limits(); }, "the DeviceLimits ops plan with")
      .def_property_readonly(
          "closed", [](const BackendPtr& r) { return r->impl == nullptr; }, "whether close() was called")
      .def_static(
          "devices",
          [](py::handle device, py::handle validation, py::handle matrix_units) {
            py::kwargs kw;
            kw["matrix_units"] = matrix_units;
            const DeviceOptions options = device_options(device, validation, kw);
            py::gil_scoped_release nogil;
            return with_keywords("Backend.devices", [&] { return list_devices(options); });
          },
          py::arg("device") = py::none(), py::arg("validation") = py::none(), py::kw_only(), py::arg("matrix_units") = py::none(),
          "Every Vulkan device, the one Backend('vulkan', device) would choose marked .chosen; matrix_units\n"
          "as Backend's decides what each reports in limits.matrix_units and matrix_note.")
      .def(
          "tensor",
          [](const BackendPtr& r, py::handle data, py::handle dtype) {
            const py::array a = as_array(data, "tensor", "data");
            const DType d = dtype.is_none() ? dtype_arg(a.dtype(), "tensor", "data.dtype") : dtype_arg(dtype, "tensor", "dtype");
            if (a.ndim() == 0) throw InvalidArgument("tensor", "data.ndim", "0", ">= 1");
            PyTensor t = new_tensor(r, Shape(a.shape(), a.shape() + a.ndim()), d, "tensor");
            upload(*r->get("tensor"), t.impl, a, "tensor");
            return t;
          },
          py::arg("data"), py::arg("dtype") = py::none(),
          "A tensor holding data (a float32, float16 or int32 numpy array or torch CPU tensor; float64\n"
          "and Python lists are refused: cast first) as dtype (default: the array's: float32 -> f32,\n"
          "float16 -> f16, int32 -> i32).")
      .def(
          "zeros",
          [](const BackendPtr& r, py::handle shape, py::handle dtype) {
            return new_tensor(r, value_arg<Shape>(shape, "zeros", "shape"), dtype_arg(dtype, "zeros", "dtype"), "zeros");
          },
          py::arg("shape"), py::arg("dtype") = "f32", "A zero-filled tensor of shape and dtype.")
      .def(
          "upload", [](const BackendPtr& r, PyTensor& t, py::handle data) { upload(*r->get("upload"), t.impl, data, "upload"); },
          py::arg("tensor"), py::arg("data"), "Copies data (the tensor's shape) into tensor.")
      .def(
          "download", [](const BackendPtr& r, const PyTensor& t) { return download(*r->get("download"), t.impl); },
          py::arg("tensor"), "A new numpy array of tensor: float32 (float16 for f16, int32 for i32).")
      .def(
          "kv_cache",
          [](const BackendPtr& r, py::handle config, const py::kwargs& kw) {
            const KvCacheConfig c = config_arg<KvCacheConfig>(config, kw, "kv_cache");
            const std::shared_ptr<Backend> b = r->get("kv_cache");
            py::gil_scoped_release nogil;  // allocating and clearing a large cache takes a while
            return PyKvCache{b->kv_cache(c), r};
          },
          py::kw_only(), py::arg("config") = py::none(),
          "A KV cache: a KvCacheConfig or its fields as keywords (n_kv_heads, head_dim and capacity\n"
          "required; n_seqs=1, dtype='f16', n_sinks=0, rope='stored', rope_config=RopeConfig(), v_head_dim=0 = head_dim,\n"
          "latent=False, paged=False, block_size=16, n_blocks (required when paged)).")
      .def(
          "save_cache",
          [](const BackendPtr& r, const PyKvCache& c) {
            std::vector<std::uint8_t> bytes;
            {
              const std::shared_ptr<Backend> b = r->get("save_cache");
              py::gil_scoped_release nogil;
              bytes = b->save_cache(c.impl);
            }
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          py::arg("cache"), "The cache's whole state as bytes (after the lists that wrote it have run).")
      .def(
          "restore_cache",
          [](const BackendPtr& r, PyKvCache& c, py::handle data) {
            if (!PyObject_CheckBuffer(data.ptr()) || py::isinstance<py::str>(data)) {
              throw type_error("restore_cache", "data", data, "bytes (or a bytearray, a memoryview)");
            }
            const auto copied = py::reinterpret_steal<py::bytes>(PyBytes_FromObject(data.ptr()));
            if (!copied) throw py::error_already_set();
            const std::string s = copied;
            const std::shared_ptr<Backend> b = r->get("restore_cache");
            py::gil_scoped_release nogil;  // it waits for the lists using the cache
            b->restore_cache(c.impl, std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
          },
          py::arg("cache"), py::arg("data"), "Restores save_cache's bytes into a cache of the same configuration.")
      .def(
          "commands",
          [](const BackendPtr& r, py::handle timestamps) {
            const bool timed = value_arg<bool>(timestamps, "commands", "timestamps");
            return PyCommandList{r->get("commands")->commands({.timestamps = timed}), r};
          },
          py::arg("timestamps") = false, "A new CommandList; timestamps=True times each op (CommandList.timings()).")
      .def(
          "validation_messages", [](const BackendPtr& r) { return r->get("validation_messages")->validation_messages(); },
          "Validation-layer warnings and errors seen so far (Vulkan with validation on).")
      .def(
          "close",
          [](const BackendPtr& r) {
            std::shared_ptr<Backend> b = std::move(r->impl);
            py::gil_scoped_release nogil;
            b.reset();
          },
          "Releases the backend now (its tensors, caches and lists stay valid: lists still submit).")
      .def("__enter__", [](const BackendPtr& r) { return r; })
      .def("__exit__",
           [](const BackendPtr& r, py::args) {
             std::shared_ptr<Backend> b = std::move(r->impl);
             py::gil_scoped_release nogil;  // as close(): it waits for the device
             b.reset();
           })
      .def("__repr__", [](const BackendPtr& r) {
        return r->impl
                   ? std::string("vkattn.Backend('") + to_string(r->impl->kind()) + "', device='" + r->impl->device_name() + "')"
                   : std::string("vkattn.Backend(closed)");
      });
}

namespace {

// A method's sequence index: a negative one is InvalidArgument naming |op| and seq (as
// every integer argument vkattn converts itself), not pybind11's TypeError.
std::size_t seq_arg(const IntArg& seq, const char* op) { return seq.as<std::size_t>(op, "seq"); }

void bind_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", "Backend storage of a shape and dtype (Backend.tensor, Backend.zeros).")
      .def_property_readonly(
          "shape", [](const PyTensor& t) { return shape_tuple(t.impl.shape()); }, "the shape, a tuple")
      .def_property_readonly(
          "dtype", [](const PyTensor& t) { return t.impl.dtype(); }, "the DType")
      .def_property_readonly(
          "numel", [](const PyTensor& t) { return t.impl.numel(); }, "the number of elements")
      .def_property_readonly(
          "nbytes", [](const PyTensor& t) { return t.impl.bytes(); }, "storage bytes")
      .def(
          "numpy", [](const PyTensor& t) { return download(*t.backend->get("numpy"), t.impl); },
          "A new numpy array of the tensor: float32 (float16 for f16, int32 for i32; q8_0 and q4_0\n"
          "dequantized to float32).")
      .def(
          "__array__",
          [](const PyTensor& t, py::handle dtype, py::handle copy) {
            // numpy 2's protocol: copy=False asks for no copy, and a download always is one.
            if (!copy.is_none() && !py::bool_(py::reinterpret_borrow<py::object>(copy))) {
              throw py::value_error("vkattn.Tensor.__array__: copy=False, but the tensor's data is downloaded (a copy)");
            }
            py::array a = download(*t.backend->get("numpy"), t.impl);
            return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def(
          "upload", [](PyTensor& t, py::handle data) { upload(*t.backend->get("upload"), t.impl, data, "upload"); },
          py::arg("data"), "Copies data (a float32/float16 or int32 array of this shape) into the tensor.")
      .def("__repr__", [](const PyTensor& t) {
        return "vkattn.Tensor(shape=" + py::repr(shape_tuple(t.impl.shape())).cast<std::string>() +
               ", dtype=" + to_string(t.impl.dtype()) + ")";
      });
}

void bind_cache(py::module_& m) {
  py::class_<PyKvCache>(m, "KvCache",
                        "One layer's KV cache, a ring per sequence, paged or not (Backend.kv_cache). Sequence arguments\n"
                        "default to 0.")
      .def_property_readonly(
          "config", [](const PyKvCache& c) { return c.impl.config(); }, "the KvCacheConfig it was made with")
      .def_property_readonly(
          "nbytes", [](const PyKvCache& c) { return c.impl.bytes(); }, "device bytes of K and V (K alone when latent)")
      .def(
          "next_position",
          [](const PyKvCache& c, const IntArg& seq) { return c.impl.next_position(seq_arg(seq, "next_position")); },
          py::arg("seq") = 0, "The next position to append to seq (0 when empty).")
      .def(
          "length", [](const PyKvCache& c, const IntArg& seq) { return c.impl.length(seq_arg(seq, "length")); },
          py::arg("seq") = 0, "Tokens of seq held now (at most capacity).")
      .def(
          "slot_positions",
          [](const PyKvCache& c, const IntArg& seq) {
            std::vector<std::int32_t> p = c.impl.slot_positions(seq_arg(seq, "slot_positions"));
            return py::array_t<std::int32_t>(static_cast<py::ssize_t>(p.size()), p.data());
          },
          py::arg("seq") = 0, "Position held in each slot of seq (int32 array), -1 for an empty slot.")
      .def(
          "slot",
          [](const PyKvCache& c, const IntArg& position) { return c.impl.slot(position.as<std::int32_t>("slot", "position")); },
          py::arg("position"), "The slot of position.")
      .def(
          // Both wait for the lists using the cache (and may submit to an engine's queue).
          "reset",
          [](PyKvCache& c, const IntArg& seq) {
            const std::size_t s = seq_arg(seq, "reset");
            const py::gil_scoped_release nogil;
            c.impl.reset(s);
          },
          py::arg("seq") = 0, "Empties seq.")
      .def(
          "truncate",
          [](PyKvCache& c, const IntArg& position, const IntArg& seq) {
            const auto p = position.as<std::int32_t>("truncate", "position");
            const std::size_t s = seq_arg(seq, "truncate");
            const py::gil_scoped_release nogil;
            c.impl.truncate(s, p);
          },
          py::arg("position"), py::arg("seq") = 0, "Drops positions >= position of seq.")
      .def_property_readonly(
          "free_blocks", [](const PyKvCache& c) { return c.impl.free_blocks(); }, "a paged cache: blocks no sequence holds")
      .def(
          "block_table",
          [](const PyKvCache& c, const IntArg& seq) {
            std::vector<std::int32_t> t = c.impl.block_table(seq_arg(seq, "block_table"));
            return py::array_t<std::int32_t>(static_cast<py::ssize_t>(t.size()), t.data());
          },
          py::arg("seq") = 0, "A paged cache: the block of each run of block_size slots of seq (int32 array), -1 for none.")
      .def(
          "block_refs",
          [](const PyKvCache& c) {
            std::vector<std::int32_t> r = c.impl.block_refs();
            return py::array_t<std::int32_t>(static_cast<py::ssize_t>(r.size()), r.data());
          },
          "A paged cache: how many sequences hold each block (int32 array of n_blocks).")
      .def(
          "blocks_to_append",
          [](const PyKvCache& c, const IntArg& n_tokens, const IntArg& seq) {
            const auto n = n_tokens.as<std::size_t>("blocks_to_append", "n_tokens");  // in the order given
            return c.impl.blocks_to_append(seq_arg(seq, "blocks_to_append"), n);
          },
          py::arg("n_tokens"), py::arg("seq") = 0,
          "A paged cache: blocks an append of n_tokens more tokens to seq would take now (new runs, copies\n"
          "of shared blocks); more than free_blocks and kv_append raises OutOfMemoryError.")
      .def("__repr__",
           [](const PyKvCache& c) { return "vkattn.KvCache(" + py::repr(py::cast(c.impl.config())).cast<std::string>() + ")"; });
}

}  // namespace

void bind_objects(py::module_& m) {
  bind_tensor(m);
  bind_cache(m);
}

}  // namespace vkattn::python
