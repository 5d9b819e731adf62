// lowcomm._C: the torch.distributed backend's creator and its traffic meter for Python.
// Import torch.distributed first (lowcomm/torch.py does): our ProcessGroup subclasses the
// c10d.ProcessGroup type torch registers.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "lowcomm/base/error.h"
#include "lowcomm/c10d/backend_rendezvous.h"

namespace py = pybind11;
using lowcomm::torchdist::ProcessGroupLowcomm;

namespace {

// The holder of our ProcessGroup's Python objects: releases the GIL while the last reference
// goes, because the group's destructor joins its worker thread, which may be waiting for the GIL
// to finish a Python future callback (DDP's hooks). Same layout as torch's own holder for
// c10d.ProcessGroup (one intrusive_ptr), as pybind11 requires along a class hierarchy.
template <typename T>
class NoGilIntrusivePtr {
 public:
  NoGilIntrusivePtr() = default;
  NoGilIntrusivePtr(const NoGilIntrusivePtr&) = default;
  NoGilIntrusivePtr(NoGilIntrusivePtr&&) = default;
  NoGilIntrusivePtr& operator=(const NoGilIntrusivePtr&) = default;
  NoGilIntrusivePtr& operator=(NoGilIntrusivePtr&&) = default;
  NoGilIntrusivePtr(c10::intrusive_ptr<T> p) : p_(std::move(p)) {}  // NOLINT: implicit, as pybind11 needs
  explicit NoGilIntrusivePtr(T* raw) : p_(c10::intrusive_ptr<T>::unsafe_steal_from_new(raw)) {}
  ~NoGilIntrusivePtr() {
    if (p_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      p_.reset();
    }
  }
  T& operator*() const noexcept { return *p_; }
  T* operator->() const noexcept { return p_.get(); }
  T* get() const noexcept { return p_.get(); }
  void reset() noexcept { p_.reset(); }
  explicit operator bool() const noexcept { return static_cast<bool>(p_); }

 private:
  c10::intrusive_ptr<T> p_;
};

py::dict countDict(const lowcomm::comm::TrafficCount& c) {
  py::dict d;
  d["bytes_sent"] = c.bytes_sent;
  d["bytes_recv"] = c.bytes_recv;
  d["messages_sent"] = c.messages_sent;
  d["messages_recv"] = c.messages_recv;
  return d;
}

py::dict mapDict(const std::map<std::string, lowcomm::comm::TrafficCount>& m) {
  py::dict d;
  for (const auto& [k, v] : m) d[py::str(k)] = countDict(v);
  return d;
}

}  // namespace

namespace lowcomm::py {

ProcessGroupLowcomm& lowcommGroup(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* ours = dynamic_cast<ProcessGroupLowcomm*>(pg.get());
  if (!ours)
    throw pybind11::type_error("not a lowcomm process group (backend '" + pg->getBackendName() +
                               "'): create it with init_process_group('lowcomm') or new_group(backend='lowcomm')");
  return *ours;
}

}  // namespace lowcomm::py

using lowcomm::py::lowcommGroup;

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilIntrusivePtr<T>, true);

PYBIND11_MODULE(_C, m) {
  m.doc() = "lowcomm's torch.distributed backend (use lowcomm.torch)";
  py::module::import("torch.distributed");

  py::register_exception<lowcomm::TimeoutError>(m, "TimeoutError", PyExc_TimeoutError);
  py::register_exception<lowcomm::PeerError>(m, "PeerError", PyExc_RuntimeError);
  py::register_exception<lowcomm::ConfigError>(m, "ConfigError", PyExc_ValueError);

  py::class_<ProcessGroupLowcomm, NoGilIntrusivePtr<ProcessGroupLowcomm>, c10d::ProcessGroup>(
      m, "ProcessGroupLowcomm")
      .def_property_readonly("deterministic", [](ProcessGroupLowcomm& pg) { return pg.options().deterministic; })
      .def("drain", &ProcessGroupLowcomm::drain, py::call_guard<py::gil_scoped_release>(),
           "Waits until every queued collective has finished and released what it held.");

  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
         int global_rank, int global_size) {
        lowcomm::torchdist::GroupSpec g{lowcomm::torchdist::torchGroupName(store), rank, size, global_rank,
                                        global_size, timeout};
        return NoGilIntrusivePtr<ProcessGroupLowcomm>(lowcomm::torchdist::createAuthenticatedGroup(g));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("global_rank"),
      py::arg("global_size"), py::call_guard<py::gil_scoped_release>(),
      "torch.distributed's creator function for the 'lowcomm' backend: `store` only names the group; the "
      "rendezvous goes through lowcomm's authenticated store (lowcomm/c10d/backend_rendezvous.h).");

  m.def(
      "traffic",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        const auto s = lowcommGroup(pg).traffic();
        py::dict d;
        d["total"] = countDict(s.total);
        d["by_op"] = mapDict(s.by_op);
        d["by_phase"] = mapDict(s.by_phase);
        d["by_link"] = mapDict(s.by_link);
        return d;
      },
      py::arg("pg"), "Bytes and messages this rank sent and received through the group, by op and link class.");

  m.def(
      "reset_traffic", [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) { lowcommGroup(pg).resetTraffic(); },
      py::arg("pg"));

  lowcomm::py::bindHooks(m);
}
