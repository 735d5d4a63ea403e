// CommandList: every op of the C++ API, with the config structs' fields as keyword
// arguments (or config=<Config>), positions and sequence ids as integer arrays or lists,
// and outputs made when not given (returned either way). Recording and submitting release
// the GIL: lavapipe builds a kernel's pipeline in seconds on first use.
#include <cstring>

#include "bindings.hpp"

namespace vkattn::python {
namespace {

// The attention ops' common arguments: tokens (arrays this object owns), config, mask.
struct AttnArgs {
  std::vector<std::int32_t> q_positions, k_positions, q_seq_ids, k_seq_ids;
  AttentionConfig config;
  const Tensor* mask = nullptr;
  AttentionTokens tokens() const { return {q_positions, k_positions, q_seq_ids, k_seq_ids}; }
};

AttnArgs attn_args(const char* op, py::handle qp, py::handle kp, py::handle qs, py::handle ks, py::handle mask, py::handle config,
                   const py::kwargs& kw) {
  if (!mask.is_none() && !py::isinstance<PyTensor>(mask)) {
    throw py::type_error(std::string(op) + "(): mask must be a vkattn.Tensor or None, not " +
                         py::str(py::type::of(mask).attr("__name__")).cast<std::string>());
  }
  return {int32_list(qp, op, "q_positions"),
          int32_list(kp, op, "k_positions"),
          int32_list(qs, op, "q_seq_ids"),
          int32_list(ks, op, "k_seq_ids"),
          config_arg<AttentionConfig>(config, kw, op),
          mask.is_none() ? nullptr : &mask.cast<PyTensor&>().impl};
}

// Destroys a discarded list's C++ list (the GIL held; released while the destructor waits
// for the list's pending submission).
void drop(PyCommandList& cmd) {
  std::optional<CommandList> gone(std::move(cmd.impl));
  py::gil_scoped_release nogil;
  gone.reset();
}

// A call running on |cmd|'s list without the GIL (PyCommandList::active). Made and
// destroyed with the GIL held: declared before the gil_scoped_release.
class Active {
 public:
  explicit Active(PyCommandList& cmd) : cmd_(cmd) { ++cmd_.active; }
  ~Active() {
    if (--cmd_.active == 0 && cmd_.discarded) drop(cmd_);
  }
  Active(const Active&) = delete;
  Active& operator=(const Active&) = delete;

 private:
  PyCommandList& cmd_;
};

// Runs |f| on |cmd|'s list (|op|: the op, for the error once discarded) without the GIL.
template <class F>
void record(PyCommandList& cmd, const char* op, F&& f) {
  CommandList& list = cmd.get(op);
  const Active active(cmd);
  py::gil_scoped_release nogil;
  f(list);
}

// Records |f|(list, output) with |out| (the op's output |param|), or a new zero-filled f32
// tensor of |shape| made by the list's backend when |out| is None; returns the output.
// That shape comes from inputs the op has not checked yet: where they are wrong it may be
// too large to make (out of memory, or past 2^40 elements), and the op's own error is
// raised instead where one of a one-element output shows it (the op checks most inputs
// before its output).
template <class F>
py::object record_into(PyCommandList& cmd, py::handle out, const char* op, const char* param, const Shape& shape, F&& f) {
  if (!out.is_none() && !py::isinstance<PyTensor>(out)) throw type_error(op, param, out, "a vkattn.Tensor or None");
  CommandList& list = cmd.get(op);  // before an output is made for a discarded list
  const Active active(cmd);         // (making the output may run another thread)
  py::object o;
  if (out.is_none()) {
    const std::shared_ptr<Backend> b = cmd.backend->get(op);
    std::optional<Tensor> made;
    const auto inputs_error = [&] {  // throws the op's error about an input, if it has one
      Tensor one = b->tensor({1, 1, 1}, DType::f32);
      try {
        f(list, one);
      } catch (const InvalidArgument& bad) {
        const std::string_view named = bad.param();
        if (!named.starts_with(param) || (named.size() > std::strlen(param) && named[std::strlen(param)] != '.')) throw;
      }
    };
    {
      py::gil_scoped_release nogil;  // a large output takes a while to allocate and clear
      try {
        made = b->tensor(shape, DType::f32);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::out_of_memory) throw;
        inputs_error();
        throw;
      } catch (const InvalidArgument& e) {
        if (e.op() != "tensor") throw;
        inputs_error();
        throw;
      }
    }
    o = py::cast(PyTensor{std::move(*made), cmd.backend});
  } else {
    o = py::reinterpret_borrow<py::object>(out);
  }
  Tensor& t = o.cast<PyTensor&>().impl;
  {
    py::gil_scoped_release nogil;
    f(list, t);
  }
  return o;
}

// The list's n_tokens, which |op| reads before its own call: a refusal (the list in use by
// another thread) names |op|, the call the caller made.
std::size_t n_tokens_for(PyCommandList& cmd, const char* op) {
  try {
    return cmd.get(op).n_tokens();
  } catch (const InvalidArgument& e) {
    throw renamed(e, op, e.param());
  }
}

// V's head dim of a cache (its output rows' width).
std::size_t value_dim(const KvCacheConfig& c) { return c.v_head_dim ? c.v_head_dim : c.head_dim; }

// [n_tokens, n_heads, last] from q (or scores, probs) [n_tokens, n_heads, ...]; a q of
// another rank gets a placeholder, which the op's own check of q reports.
Shape rows_shape(const Tensor& q, std::size_t last) {
  const Shape& s = q.shape();
  return s.size() == 3 ? Shape{s[0], s[1], last} : Shape{1};
}

std::size_t dim(const Tensor& t, std::size_t i) { return t.shape().size() > i ? t.shape()[i] : 1; }

constexpr const char* kTokensDoc =
    "q_positions, k_positions, q_seq_ids, k_seq_ids: integer arrays or lists (AttentionTokens;\n"
    "empty: keys at 0..n_keys-1, all in sequence 0). mask: an f32 Tensor [n_tokens, n_keys] or\n"
    "None. config: an AttentionConfig, and/or its fields as keywords (scale, causal, window,\n"
    "window_type, chunk, query_temperature, softcap, softcap_order, alibi, alibi_slopes, sinks,\n"
    "path, precision, mask_keys). Over a KvCache in k's place, k_positions and k_seq_ids are not\n"
    "taken (the cache holds them).";

// An attention op's docstring: what it computes, then the keywords every one takes.
const char* attn_doc(const char* what) {
  static std::vector<std::unique_ptr<std::string>> docs;  // pybind11 keeps the pointer
  docs.push_back(std::make_unique<std::string>(std::string(what) + "\n" + kTokensDoc));
  return docs.back()->c_str();
}

void bind_attention_ops(py::class_<PyCommandList>& cls) {
  using py::arg;
  const py::none none;
  cls.def(
         "attn_scores",
         [](PyCommandList& cmd, const PyTensor& q, const PyTensor& k, py::handle scores, py::handle qp, py::handle kp,
            py::handle qs, py::handle ks, py::handle mask, py::handle config, const py::kwargs& kw) {
           const AttnArgs a = attn_args("attn_scores", qp, kp, qs, ks, mask, config, kw);
           return record_into(cmd, scores, "attn_scores", "scores", rows_shape(q.impl, dim(k.impl, 0)),
                              [&](CommandList& l, Tensor& o) { l.attn_scores(q.impl, k.impl, o, a.tokens(), a.config, a.mask); });
         },
         arg("q"), arg("k"), arg("scores") = none, py::kw_only(), arg("q_positions") = none, arg("k_positions") = none,
         arg("q_seq_ids") = none, arg("k_seq_ids") = none, arg("mask") = none, arg("config") = none,
         attn_doc("scores [n_tokens, n_heads, n_keys] f32 = scale * q k^T (+ softcap, ALiBi, mask; -inf\n"
                  "where a key is not visible); made when not given, returned."))
      .def(
          "attn_scores",
          [](PyCommandList& cmd, const PyTensor& q, const PyKvCache& cache, py::handle scores, py::handle qp, py::handle qs,
             py::handle mask, py::handle config, const py::kwargs& kw) {
            const AttnArgs a = attn_args("attn_scores", qp, py::none(), qs, py::none(), mask, config, kw);
            const Shape shape = rows_shape(q.impl, cache.impl.config().capacity);
            return record_into(cmd, scores, "attn_scores", "scores", shape, [&](CommandList& l, Tensor& o) {
              l.attn_scores(q.impl, cache.impl, o, a.tokens(), a.config, a.mask);
            });
          },
          arg("q"), arg("cache"), arg("scores") = none, py::kw_only(), arg("q_positions") = none, arg("q_seq_ids") = none,
          arg("mask") = none, arg("config") = none, attn_doc("The same over a KvCache: n_keys = capacity, keys in slot order."))
      .def(
          "attn_softmax",
          [](PyCommandList& cmd, const PyTensor& scores, py::handle probs, py::handle config, const py::kwargs& kw) {
            const AttentionConfig c = config_arg<AttentionConfig>(config, kw, "attn_softmax");
            return record_into(cmd, probs, "attn_softmax", "probs", scores.impl.shape(),
                               [&](CommandList& l, Tensor& o) { l.attn_softmax(scores.impl, o, c); });
          },
          arg("scores"), arg("probs") = none, py::kw_only(), arg("config") = none,
          "probs = softmax over each row of scores, with config.sinks in the denominator; probs may be\n"
          "scores (in place); made when not given, returned.")
      .def(
          "attn_weighted_sum",
          [](PyCommandList& cmd, const PyTensor& probs, const PyTensor& v, py::handle out) {
            return record_into(cmd, out, "attn_weighted_sum", "out", rows_shape(probs.impl, dim(v.impl, 2)),
                               [&](CommandList& l, Tensor& o) { l.attn_weighted_sum(probs.impl, v.impl, o); });
          },
          arg("probs"), arg("v"), arg("out") = none,
          "out [n_tokens, n_heads, head_dim] f32 = probs x v; made when not given, returned.")
      .def(
          "attn_weighted_sum",
          [](PyCommandList& cmd, const PyTensor& probs, const PyKvCache& cache, py::handle out, py::handle qp, py::handle qs) {
            const AttnArgs a = attn_args("attn_weighted_sum", qp, py::none(), qs, py::none(), py::none(), py::none(), {});
            const Shape shape = rows_shape(probs.impl, value_dim(cache.impl.config()));
            return record_into(cmd, out, "attn_weighted_sum", "out", shape,
                               [&](CommandList& l, Tensor& o) { l.attn_weighted_sum(probs.impl, cache.impl, o, a.tokens()); });
          },
          arg("probs"), arg("cache"), arg("out") = none, py::kw_only(), arg("q_positions") = none, arg("q_seq_ids") = none,
          "The same over a KvCache's values.")
      .def(
          "attention",
          [](PyCommandList& cmd, const PyTensor& q, const PyTensor& k, const PyTensor& v, py::handle out, py::handle qp,
             py::handle kp, py::handle qs, py::handle ks, py::handle mask, py::handle config, const py::kwargs& kw) {
            const AttnArgs a = attn_args("attention", qp, kp, qs, ks, mask, config, kw);
            return record_into(cmd, out, "attention", "out", rows_shape(q.impl, dim(v.impl, 2)), [&](CommandList& l, Tensor& o) {
              l.attention(q.impl, k.impl, v.impl, o, a.tokens(), a.config, a.mask);
            });
          },
          arg("q"), arg("k"), arg("v"), arg("out") = none, py::kw_only(), arg("q_positions") = none, arg("k_positions") = none,
          arg("q_seq_ids") = none, arg("k_seq_ids") = none, arg("mask") = none, arg("config") = none,
          attn_doc("out [n_tokens, n_heads, v_head_dim] f32 = softmax(scores) x v in one op (config.path\n"
                   "picks the kernels); made when not given, returned. Its mask may also be a key list, an\n"
                   "i32 Tensor [n_tokens, width <= 4096]: the keys each token may see (-1: none)."))
      .def(
          "attention",
          [](PyCommandList& cmd, const PyTensor& q, const PyKvCache& cache, py::handle out, py::handle qp, py::handle qs,
             py::handle mask, py::handle config, const py::kwargs& kw) {
            const AttnArgs a = attn_args("attention", qp, py::none(), qs, py::none(), mask, config, kw);
            const Shape shape = rows_shape(q.impl, value_dim(cache.impl.config()));
            return record_into(cmd, out, "attention", "out", shape, [&](CommandList& l, Tensor& o) {
              l.attention(q.impl, cache.impl, o, a.tokens(), a.config, a.mask);
            });
          },
          arg("q"), arg("cache"), arg("out") = none, py::kw_only(), arg("q_positions") = none, arg("q_seq_ids") = none,
          arg("mask") = none, arg("config") = none, attn_doc("The same over a KvCache's keys and values."));
}

}  // namespace

CommandList& PyCommandList::get(const char* op) {
  if (discarded) {
    throw InvalidArgument(op, "this", "a list whose with-block raised (discarded)", "a list from Backend.commands()");
  }
  return impl;
}

PyCommandList::~PyCommandList() {
  if (!PyGILState_Check()) return;  // off Python's threads: destroyed as it is
  std::optional<CommandList> gone(std::move(impl));
  py::gil_scoped_release nogil;
  gone.reset();
}

void bind_commands(py::module_& m) {
  using py::arg;
  py::class_<PyCommandList> cls(m, "CommandList",
                                "Records ops; nothing runs until submit() (one vkQueueSubmit for the whole list on Vulkan).\n"
                                "As a context manager it submits at the end of the block unless the block raised. A list\n"
                                "can be submitted again: it reruns on the tensors' current contents. Attention ops take\n"
                                "their tokens and configuration as keywords:\n");
  cls.attr("__doc__") = py::str(cls.attr("__doc__")) + py::str(kTokensDoc);
  cls.def(
         "copy",
         [](PyCommandList& cmd, const PyTensor& src, PyTensor& dst) {
           record(cmd, "copy", [&](CommandList& l) { l.copy(src.impl, dst.impl); });
         },
         arg("src"), arg("dst"), "dst = src (same dtype and number of elements).")
      .def(
          "rope",
          [](PyCommandList& cmd, PyTensor& x, py::handle positions, py::handle config, const py::kwargs& kw) {
            const RopeConfig c = config_arg<RopeConfig>(config, kw, "rope");
            const std::vector<std::int32_t> p = int32_list(positions, "rope", "positions", c.mrope ? Rows::three : Rows::one);
            record(cmd, "rope", [&](CommandList& l) { l.rope(x.impl, p, c); });
          },
          arg("x"), arg("positions"), py::kw_only(), arg("config") = py::none(),
          "RoPE in place on x [n_tokens, n_heads, head_dim] at positions: n_tokens integers in\n"
          "[0, 2^31), or with mrope [n_tokens, 3] (t, h, w per token; a flat array is refused). config:\n"
          "a RopeConfig, and/or its fields as keywords (layout, rotary_dim, rotary_offset, base,\n"
          "scaling, factor, original_context, sequence_length, yarn, llama3, freq_factors,\n"
          "attention_factor, mrope).")
      .def(
          "rope",
          [](PyCommandList& cmd, PyTensor& q, PyTensor& k, py::handle positions, py::handle config, const py::kwargs& kw) {
            const RopeConfig c = config_arg<RopeConfig>(config, kw, "rope");
            const std::vector<std::int32_t> p = int32_list(positions, "rope", "positions", c.mrope ? Rows::three : Rows::one);
            record(cmd, "rope", [&](CommandList& l) { l.rope(q.impl, k.impl, p, c); });
          },
          arg("q"), arg("k"), arg("positions"), py::kw_only(), arg("config") = py::none(), "The same on Q and K in one dispatch.")
      .def(
          "kv_append",
          [](PyCommandList& cmd, PyKvCache& cache, const PyTensor& k, const PyTensor* v, py::handle positions, py::handle seq_ids,
             py::handle keep_last) {
            const std::vector<std::int32_t> p = int32_list(positions, "kv_append", "positions");
            const std::vector<std::int32_t> s = int32_list(seq_ids, "kv_append", "seq_ids");
            const KvAppendOptions options{.keep_last = value_arg<bool>(keep_last, "kv_append", "keep_last")};  // with the GIL
            record(cmd, "kv_append", [&](CommandList& l) {
              if (v)
                l.kv_append(cache.impl, k.impl, v->impl, p, s, options);
              else  // K alone: a latent cache's (the library refuses it for any other)
                l.kv_append(cache.impl, k.impl, p, s, options);
            });
          },
          arg("cache"), arg("k"), arg("v").none(true), arg("positions"), arg("seq_ids") = py::none(), py::kw_only(),
          arg("keep_last") = false,
          "Writes each token's key and value into the cache at its position (consecutive, continuing\n"
          "at cache.next_position(seq)); v=None (or the form below) for a latent cache, and only then.\n"
          "The cache's bookkeeping advances now: submit the list once.")
      .def(
          "kv_append",
          [](PyCommandList& cmd, PyKvCache& cache, const PyTensor& k, py::handle positions, py::handle seq_ids,
             py::handle keep_last) {
            if (py::isinstance<PyTensor>(positions)) {  // a V, with the positions left out
              throw py::type_error(
                  "kv_append(): a Tensor where positions go: kv_append(cache, k, v, positions), or "
                  "kv_append(cache, k, positions) for a latent cache");
            }
            const std::vector<std::int32_t> p = int32_list(positions, "kv_append", "positions");
            const std::vector<std::int32_t> s = int32_list(seq_ids, "kv_append", "seq_ids");
            const KvAppendOptions options{.keep_last = value_arg<bool>(keep_last, "kv_append", "keep_last")};  // with the GIL
            record(cmd, "kv_append", [&](CommandList& l) { l.kv_append(cache.impl, k.impl, p, s, options); });
          },
          // positions never None: pybind11 offers v=None to the overloads without conversions
          // first, and this one must then not take kv_append(cache, k, None, positions).
          arg("cache"), arg("k"), arg("positions").none(false), arg("seq_ids") = py::none(), py::kw_only(),
          arg("keep_last") = false,
          "kv_append(cache, k, positions, seq_ids=None, *, keep_last=False): K alone, for a latent\n"
          "cache (V is inside K), as the C++ call; the same as v=None, and refused for any other cache.")
      .def(
          "kv_copy_sequence",
          [](PyCommandList& cmd, PyKvCache& cache, const IntArg& src, const IntArg& dst) {
            const auto s = src.as<std::size_t>("kv_copy_sequence", "src");
            const auto d = dst.as<std::size_t>("kv_copy_sequence", "dst");
            record(cmd, "kv_copy_sequence", [&](CommandList& l) { l.kv_copy_sequence(cache.impl, s, d); });
          },
          arg("cache"), arg("src"), arg("dst"), "Makes sequence dst a copy of src (prefix sharing).");
  bind_attention_ops(cls);
  cls.def(
         "submit", [](PyCommandList& cmd) { record(cmd, "submit", [](CommandList& l) { l.submit_and_wait(); }); },
         "Runs everything recorded and waits (the C++ submit_and_wait).")
      .def(
          "wait",
          [](PyCommandList& cmd, py::handle timeout) {
            const auto seconds = value_arg<std::optional<double>>(timeout, "wait", "timeout");
            std::uint64_t ns = UINT64_MAX;  // None: no limit
            if (seconds) {
              if (!(*seconds >= 0)) {
                throw InvalidArgument("wait", "timeout", py::repr(timeout).cast<std::string>(),
                                      "a number of seconds >= 0, or None (no limit)");
              }
              // Past 2^64 ns (585 years) or infinite: no limit.
              if (*seconds < 1.8e10) ns = static_cast<std::uint64_t>(*seconds * 1e9);
            }
            bool finished = false;
            record(cmd, "wait", [&](CommandList& l) { finished = l.wait(ns); });
            return finished;
          },
          arg("timeout") = py::none(),
          "Waits up to timeout seconds (None: no limit) for the submission a submit() that raised\n"
          "DeviceTimeoutError left running, running nothing (a retry of submit() runs the list\n"
          "again): True once it has finished or when none runs, False on timeout.")
      .def(
          "set_tokens",
          [](PyCommandList& cmd, py::handle positions, py::handle seq_ids, py::handle mrope_positions) {
            const std::size_t n = n_tokens_for(cmd, "set_tokens");
            const std::vector<std::int32_t> p = int32_list(positions, "set_tokens", "positions", Rows::either, n);
            const std::vector<std::int32_t> s = int32_list(seq_ids, "set_tokens", "seq_ids");
            const std::vector<std::int32_t> m = int32_list(mrope_positions, "set_tokens", "mrope_positions", Rows::either, n);
            record(cmd, "set_tokens", [&](CommandList& l) { l.set_tokens(p, s, m); });
          },
          arg("positions"), arg("seq_ids") = py::none(), arg("mrope_positions") = py::none(),
          "Replay: records the list's ops again for the next tokens, each op taking these positions\n"
          "(and these sequence ids where it took some; None: each keeps its own; refused where no op\n"
          "took any). With M-RoPE ops,\n"
          "positions may be [n_tokens, 3] (t, h, w per token; the C++ call's flat 3 x n_tokens, t, h, w\n"
          "per token, too): those take all three, every other op t. Once an image has made the cache\n"
          "positions differ from t, give them as positions (one per token) and the M-RoPE ones as\n"
          "mrope_positions ([n_tokens, 3], or one per token: t = h = w). On Vulkan the command buffer\n"
          "is kept and only parameters change. On an error nothing changes.")
      .def(
          "timings",
          [](PyCommandList& cmd) {
            py::list out;
            for (const OpTiming& t : cmd.get("timings").timings()) out.append(py::make_tuple(t.op, t.ms));
            return out;
          },
          "[(op, ms)] of the last submission (Backend.commands(timestamps=True)).")
      .def(
          "stats",
          [](PyCommandList& cmd) {
            const CommandStats s = cmd.get("stats").stats();
            py::dict d;
            d["ops"] = s.ops;
            d["barriers"] = s.barriers;
            d["submits"] = s.submits;
            d["texel_reads"] = s.texel_reads;
            d["encodings"] = s.encodings;
            py::list runs;
            for (const AttentionRun& r : s.attention) {
              py::dict run;
              run["kernel"] = to_string(r.kernel);
              run["splits"] = r.splits;
              run["precision"] = to_string(r.precision);
              run["sparse"] = r.sparse;
              runs.append(run);
            }
            d["attention"] = runs;
            return d;
          },
          "{'ops', 'barriers', 'submits', 'texel_reads', 'encodings'}: counts (vkattn::CommandStats);\n"
          "'attention': each attention op's {'kernel', 'splits', 'precision', 'sparse'}, in recording\n"
          "order (kernel: 'reference', 'three_stages', 'lane_per_key', 'decode', 'group', 'tiled',\n"
          "'matrix' or 'matrix_standin'; precision: what it computed at, 'f32' where f16_products fell\n"
          "back; sparse: whether only the keys each mask row leaves were read, mask_keys).")
      .def_property_readonly(
          "n_tokens", [](PyCommandList& cmd) { return cmd.get("n_tokens").n_tokens(); },
          "The number of tokens set_tokens takes (what the ops were recorded with); 0 when none.")
      .def("__enter__", [](py::handle self) { return py::reinterpret_borrow<py::object>(self); })
      .def("__exit__", [](PyCommandList& cmd, py::handle type, py::handle, py::handle) {
        if (type.is_none()) {
          record(cmd, "submit", [](CommandList& l) { l.submit_and_wait(); });
        } else if (!cmd.discarded) {
          // The block raised: the list goes now, as a C++ list goes when an exception leaves
          // its scope, putting back what it changed in caches' bookkeeping; an exception kept
          // (its traceback holds the list) must not keep a cache counting rows never written.
          // Another thread inside the list (misuse) finishes first: the last one drops it.
          cmd.discarded = true;
          if (cmd.active == 0) drop(cmd);
        }
        return false;
      });
}

}  // namespace vkattn::python
