// Point to point and the barriers of Ops: send, recv (from a named rank or any), barrier, and the monitored barrier
// that names the ranks that did not arrive.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "torch/ops.h"
#include "torch/tensor_args.h"

namespace mpcomm::torch_backend {

Ops::Works Ops::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const std::string op = "send";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, communicator());
  return launch(c10d::OpType::SEND, "mpcomm:send", tensors, {}, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], false);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(communicator().isend(t.data_ptr(), elems(t), to_mpcomm(t, op), dst, tag));
  });
}

Ops::Works Ops::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return receive(tensors, src, tag, c10d::OpType::RECV, "mpcomm:recv");
}

Ops::Works Ops::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return receive(tensors, kAnySource, tag, c10d::OpType::RECVANYSOURCE, "mpcomm:recvAnySource");
}

Ops::Works Ops::receive(std::vector<at::Tensor>& tensors, int src, int tag, c10d::OpType type, const char* title) {
  const std::string op = "recv";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, communicator());
  return launch(type, title, tensors, tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(communicator().irecv(t.data_ptr(), elems(t), to_mpcomm(t, op), src, tag));
  });
}

Ops::Works Ops::barrier(const c10d::BarrierOptions&) {
  return launch(c10d::OpType::BARRIER, "mpcomm:barrier", {}, {},
                [&](MpcommWork& w) { w.requests.push_back(communicator().ibarrier()); });
}

namespace {

// The tag of the monitored barrier's messages: above any tag c10d code passes in practice.
constexpr int kMonitoredBarrierTag = 0x7ffffff0;

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

void Ops::monitored_barrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // c10d's unset timeout is negative (kUnsetTimeout): then the group's. Zero is a timeout of its own.
  const std::chrono::milliseconds timeout =
      opts.timeout.count() >= 0 ? opts.timeout : std::chrono::milliseconds(communicator().options().timeout.count());
  std::vector<uint8_t> tokens(static_cast<size_t>(size_) + 1, 1);
  if (rank_ != 0) {
    // Report to rank 0, then wait for its release (bounded by the group's timeout).
    Request sent, released;
    {
      auto g = issue_lock();
      sent = communicator().isend(&tokens[0], 1, DataType::uint8, 0, kMonitoredBarrierTag);
      released = communicator().irecv(&tokens[1], 1, DataType::uint8, 0, kMonitoredBarrierTag);
    }
    sent.wait();
    released.wait();
    return;
  }
  std::vector<Request> arrived(static_cast<size_t>(size_));
  {
    auto g = issue_lock();
    for (int r = 1; r < size_; ++r)
      arrived[static_cast<size_t>(r)] =
          communicator().irecv(&tokens[static_cast<size_t>(r)], 1, DataType::uint8, r, kMonitoredBarrierTag);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  bool out_of_time = false;  // the deadline had passed before rank 0 could wait for the first rank missing
  for (int r = 1; r < size_; ++r) {
    // A rank that reported is not waited for again; after the deadline every rank left is only tested.
    const bool late = std::chrono::steady_clock::now() >= deadline;
    while (!arrived[static_cast<size_t>(r)].test() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (!arrived[static_cast<size_t>(r)].test()) {
      if (missing.empty()) out_of_time = late;
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  if (!missing.empty()) {
    // gloo's words, which PyTorch's users match: rank 0's own time ran out, or named ranks failed to pass.
    const std::string msg =
        "mpcomm: monitored_barrier: " +
        (out_of_time ? "Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) +
                           " ms (not yet reported: " + std::string(missing.size() == 1 ? "rank " : "ranks ") +
                           ranks_text(missing) + ")"
                     : std::string(missing.size() == 1 ? "Rank " : "Ranks ") + ranks_text(missing) +
                           " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms");
    // The receives still posted would take a later message of those ranks: the group cannot go on.
    communicator().abort(msg);
    throw std::runtime_error(msg);
  }
  std::vector<Request> releases;
  {
    auto g = issue_lock();
    for (int r = 1; r < size_; ++r)
      releases.push_back(
          communicator().isend(&tokens[static_cast<size_t>(r)], 1, DataType::uint8, r, kMonitoredBarrierTag));
  }
  for (auto& r : releases) r.wait();
}

}  // namespace mpcomm::torch_backend
