// Backend(log=...): DeviceOptions::log for Python. vkattn calls its log function on the
// thread whose call caused the message, which may hold none of Python and may hold locks
// of vkattn's own (a pipeline build, a queue): taking the GIL there could wait on a Python
// thread that waits on that lock. So the function only queues the message, and one of
// Python's pending calls (Py_AddPendingCall: any thread, no GIL) hands the queue to the
// callback on the main thread, in order, at the interpreter's next check. Nothing here
// ever waits for the GIL.
#include <deque>
#include <mutex>
#include <utility>

#include "bindings.hpp"

namespace vkattn::python {

namespace {

constexpr std::size_t kMostQueued = 4096;  // past it the oldest go, counted

struct LogQueue {
  py::object callback;
  std::mutex mutex;
  std::deque<std::pair<LogLevel, std::string>> messages;
  std::size_t dropped = 0;
  bool scheduled = false;  // a drain is pending
};

// The callback's last reference goes where the GIL is: now, or in a pending call.
int release_callback(void* object) {
  Py_DECREF(static_cast<PyObject*>(object));
  return 0;
}

void delete_queue(LogQueue* q) {
  PyObject* callback = q->callback.release().ptr();
  delete q;
  if (!callback) return;
  if (PyGILState_Check()) {
    Py_DECREF(callback);
  } else if (Py_AddPendingCall(release_callback, callback) != 0) {
    // The interpreter is going away: the reference is left to it.
  }
}

int drain(void* arg) {  // a pending call: the main thread, with the GIL
  std::shared_ptr<LogQueue> q = std::move(*static_cast<std::shared_ptr<LogQueue>*>(arg));
  delete static_cast<std::shared_ptr<LogQueue>*>(arg);
  std::deque<std::pair<LogLevel, std::string>> batch;
  std::size_t dropped = 0;
  {
    std::lock_guard lock(q->mutex);
    batch.swap(q->messages);
    std::swap(dropped, q->dropped);
    q->scheduled = false;
  }
  if (dropped > 0) {
    batch.emplace_front(LogLevel::warning, std::to_string(dropped) + " earlier messages dropped (more than " +
                                               std::to_string(kMostQueued) + " waited for the main thread)");
  }
  for (auto& [level, text] : batch) {
    try {
      // Invalid UTF-8 (a path in the message) is replaced, not raised: py::str would raise.
      const auto message =
          py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
      if (!message) throw py::error_already_set();
      q->callback(level, message);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("vkattn.Backend log callback");  // the rest are still delivered
    }
  }
  return 0;
}

}  // namespace

LogCallback python_log(py::handle callback) {
  if (!PyCallable_Check(callback.ptr())) {
    throw type_error("Backend", "log", callback, "a callable (level: LogLevel, message: str), or None");
  }
  std::shared_ptr<LogQueue> q(new LogQueue, delete_queue);
  q->callback = py::reinterpret_borrow<py::object>(callback);
  return [q](LogLevel level, std::string_view message) noexcept {
    try {
      {
        std::lock_guard lock(q->mutex);
        if (q->messages.size() >= kMostQueued) {
          q->messages.pop_front();
          ++q->dropped;
        }
        q->messages.emplace_back(level, std::string(message));
        if (q->scheduled) return;
        q->scheduled = true;
      }
      std::shared_ptr<LogQueue>* arg = nullptr;
      try {
        arg = new std::shared_ptr<LogQueue>(q);
      } catch (...) {
      }
      // Pending calls full, or the interpreter going away: the next message tries again.
      if (!arg || Py_AddPendingCall(drain, arg) != 0) {
        delete arg;  // not the last reference: q holds one
        std::lock_guard lock(q->mutex);
        q->scheduled = false;
      }
    } catch (...) {  // out of memory: the message is lost, never the call that logged it
    }
  };
}

}  // namespace vkattn::python
