// The Python extension mpcomm._C: creates the "mpcomm" group for torch.distributed (a ProcessGroup on PyTorch
// 1.13, a Backend on 2.x; python/mpcomm/torch.py registers it), and holds the private benchmark hook
// _time_from_cpp.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "mpcomm/communicator.h"
#include "mpcomm/reproducible.h"
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

mpcomm::DataType repro_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return mpcomm::DataType::float32;
    case at::kDouble:
      return mpcomm::DataType::float64;
    case at::kBFloat16:
      return mpcomm::DataType::bfloat16;
    case at::kHalf:
      return mpcomm::DataType::float16;
    default:
      throw std::invalid_argument("mpcomm.ReproducibleSum: a floating tensor (float16, bfloat16, float32, float64)");
  }
}

// A CPU tensor of the accumulator's type and size, contiguous.
void check_tensor(const mpcomm::ReproducibleSum& s, const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu() || !t.is_contiguous() || repro_dtype(t) != s.dtype() ||
      static_cast<size_t>(t.numel()) != s.count())
    throw std::invalid_argument(std::string("mpcomm.ReproducibleSum.") + what + ": a contiguous CPU tensor of " +
                                std::to_string(s.count()) + " " + std::string(mpcomm::to_string(s.dtype())) +
                                " elements");
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
  m.def(
      "shrink",
      [](const c10::intrusive_ptr<GroupBase>& pg, const std::vector<int>& exclude) -> py::object {
        ProcessGroupMpcomm& g = mpcomm_group(pg, "shrink");
        c10::intrusive_ptr<GroupBase> shrunk;
        std::vector<int32_t> kept;
        {
          py::gil_scoped_release nogil;
          shrunk = g.shrunk(exclude);
          if (shrunk) {
            // Each member's rank in the old group, in the new order: the caller's map from global ranks, and the
            // new group's first collective.
            const int32_t old_rank = g.getRank();
            kept.resize(static_cast<size_t>(shrunk->getSize()));
            mpcomm_group(shrunk, "shrink").communicator().allgather(&old_rank, kept.data(), 1, mpcomm::DataType::int32);
          }
        }
        if (!shrunk) return py::none();
        return py::make_tuple(shrunk, kept);
      },
      py::arg("pg"), py::arg("exclude"),
      "Communicator::shrink on an mpcomm group: (the new group over the ranks still alive, each member's rank in the "
      "old group), or None on a rank that `exclude` names.");
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
  py::class_<mpcomm::ReproducibleSum>(m, "ReproducibleSum",
                                      "An exact accumulator of tensors (mpcomm/reproducible.h): its sum over every "
                                      "rank depends only on the multiset of tensors added anywhere.")
      .def(py::init([](const at::Tensor& like) {
             return std::make_unique<mpcomm::ReproducibleSum>(repro_dtype(like), static_cast<size_t>(like.numel()));
           }),
           py::arg("like"), "An accumulator for tensors of like's dtype and number of elements.")
      .def(
          "add",
          [](mpcomm::ReproducibleSum& s, const at::Tensor& t) {
            check_tensor(s, t, "add");
            s.add(t.data_ptr());
          },
          "Adds a tensor.")
      .def("clear", &mpcomm::ReproducibleSum::clear)
      .def_property_readonly("vectors", &mpcomm::ReproducibleSum::vectors)
      .def(
          "allreduce",
          [](const mpcomm::ReproducibleSum& s, const c10::intrusive_ptr<GroupBase>& pg, at::Tensor& out) {
            check_tensor(s, out, "allreduce");
            s.allreduce(mpcomm_group(pg, "ReproducibleSum.allreduce").communicator(), out.data_ptr());
          },
          py::arg("pg"), py::arg("out"), py::call_guard<py::gil_scoped_release>(),
          "Collective over an mpcomm group: out = the sum of every rank's tensors.");
  m.attr("_built_for_torch") = mpcomm::torch_backend::kBuiltForTorch;
  m.def("available_backends", &mpcomm::available_backends, "mpcomm backends usable on this machine.");
}
