// The Python extension mpcomm._C: creates the "mpcomm" group for torch.distributed (a ProcessGroup on PyTorch
// 1.13, a Backend on 2.x; python/mpcomm/torch.py registers it), and holds the private benchmark hook
// _time_from_cpp.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "mpcomm/communicator.h"
#include "torch/bench.h"
#include "torch/compat.h"
#include "torch/process_group.h"

namespace py = pybind11;
using mpcomm::torch_backend::GroupBase;
using mpcomm::torch_backend::ProcessGroupMpcomm;

namespace {

ProcessGroupMpcomm& mpcomm_group(const c10::intrusive_ptr<GroupBase>& pg, const char* what) {
  auto* p = dynamic_cast<ProcessGroupMpcomm*>(pg.get());
  if (!p) throw std::invalid_argument(std::string("mpcomm: ") + what + ": not an mpcomm group");
  return *p;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "mpcomm's torch.distributed backend (import mpcomm.torch to register it)";
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::duration<float> timeout) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        return c10::intrusive_ptr<GroupBase>(c10::make_intrusive<ProcessGroupMpcomm>(store, rank, size, ms));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
      "Creates the mpcomm process group of `size` ranks meeting through the c10d `store` (MPCOMM_BACKEND picks "
      "the mpcomm backend underneath, native by default); `timeout` bounds the rendezvous and every op.");
  m.def(
      "backend_of",
      [](const c10::intrusive_ptr<GroupBase>& pg) { return mpcomm_group(pg, "backend_of").mpcomm_backend(); },
      "The mpcomm backend under an mpcomm process group (native, gloo, mpi, nccl, auto).");
  m.def(
      "flight_record",
      [](const c10::intrusive_ptr<GroupBase>& pg) {
        return mpcomm_group(pg, "flight_record").communicator().flight_record();
      },
      "The flight recorder's text of an mpcomm process group: its last operations with state and times.");
  // scripts/torch-bench's "c++" column: private, not part of mpcomm.torch's API.
  m.def(
      "_time_from_cpp",
      [](const c10::intrusive_ptr<GroupBase>& pg, const std::string& op, size_t count, int iters, bool barrier) {
        return mpcomm::torch_backend::time_from_cpp(mpcomm_group(pg, "time_from_cpp").ops(), op, count, iters, barrier);
      },
      py::arg("pg"), py::arg("op"), py::arg("count"), py::arg("iters"), py::arg("barrier") = true,
      py::call_guard<py::gil_scoped_release>(),
      "Seconds of each of `iters` calls of op (allreduce, broadcast, alltoall: blocking; iallreduce: the "
      "non-blocking call and its wait; sendrecv: an isend/irecv ring) on float32 buffers of `count` elements, made "
      "from C++ on the group's communicator, each after a barrier (unless barrier=False).");
  m.attr("_built_for_torch") = mpcomm::torch_backend::kBuiltForTorch;
  m.def("available_backends", &mpcomm::available_backends, "mpcomm backends usable on this machine.");
}
