// What the trainer's tests share: a small model, training on a world of threads, comparing losses, and a
// communicator that records every call the trainer makes on a group.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/front_door.h"
#include "core/op.h"
#include "harness/thread_world.h"
#include "parallel/kernels.h"
#include "parallel/trainer.h"

namespace mpcomm::parallel {

using testing::ThreadWorld;

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

inline TrainConfig small_config() {
  TrainConfig c;
  c.layers = 2, c.hidden = 32, c.heads = 4, c.seq = 16, c.batch = 8, c.steps = 4;
  c.micro_batches = 2;
  c.seed = 7;
  c.adamw.lr = 3e-3;  // large enough that the weights move and a wrong gradient shows in the loss
  return c;
}

// Trains `c` on a world of `backend` and returns rank 0's losses (checking every rank saw the same).
inline std::vector<double> train_on(const std::string& backend, const TrainConfig& c) {
  ThreadWorld world(backend, c.dims.world());
  std::vector<std::vector<double>> losses(static_cast<size_t>(c.dims.world()));
  world.run([&](int rank, Communicator& comm) { losses[static_cast<size_t>(rank)] = train(c, comm).losses; });
  for (const auto& l : losses) EXPECT_EQ(l, losses[0]) << "every rank returns the broadcast loss";
  return losses[0];
}

inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(a[i]));
  return worst;
}

inline const std::vector<double>& single_process_losses() {
  static const std::vector<double> losses = train_on("native", small_config());
  return losses;
}

// Forwards every call to the communicator it wraps and records (op, count, dtype, redop): a backend made
// of a communicator, behind a front door of its own.
class RecordingCommunicator : public detail::Backend {
 public:
  struct Call {
    OpKind kind;
    size_t count;
    ReduceOp redop;
    std::vector<size_t> send_counts = {};  // alltoallv
    bool operator==(const Call&) const = default;
  };
  friend std::ostream& operator<<(std::ostream& os, const Call& c) {
    return os << to_string(c.kind) << "(" << c.count << (c.redop == ReduceOp::max ? ", max" : "") << ")";
  }
  explicit RecordingCommunicator(std::unique_ptr<Communicator> inner)
      : Backend("recording", inner->rank(), inner->size(), inner->topology(), inner->options(), nullptr),
        inner_(std::move(inner)) {}
  std::vector<Call> calls;

  void run(const detail::Op& op) override {
    calls.push_back({op.kind, op.count, op.reduces() ? op.redop : ReduceOp::sum});
    if (op.kind == OpKind::alltoallv)
      calls.back().send_counts.assign(op.v->send_counts.begin(), op.v->send_counts.end());
    switch (op.kind) {
      case OpKind::allreduce:
        inner_->allreduce(op.send, op.recv, op.count, op.dtype, op.redop);
        break;
      case OpKind::broadcast:
        inner_->broadcast(op.recv, op.count, op.dtype, op.root);
        break;
      case OpKind::reduce_scatter:
        inner_->reduce_scatter(op.send, op.recv, op.count, op.dtype, op.redop);
        break;
      case OpKind::allgather:
        inner_->allgather(op.send, op.recv, op.count, op.dtype);
        break;
      case OpKind::alltoall:
        inner_->alltoall(op.send, op.recv, op.count, op.dtype);
        break;
      case OpKind::alltoallv:
        inner_->alltoallv(op.send, op.v->send_counts, op.v->send_displs, op.recv, op.v->recv_counts, op.v->recv_displs,
                          op.dtype);
        break;
      default:
        throw Internal("recording communicator: the trainer is not expected to call " + detail::describe(op));
    }
  }
  std::shared_ptr<detail::RequestState> start(const detail::Op& op) override {
    calls.push_back({op.kind, op.count, ReduceOp::sum});
    struct Forwarded : detail::RequestState {
      Request r;
      void wait() override { r.wait(); }
      bool test() override { return r.test(); }
    };
    auto f = std::make_shared<Forwarded>();
    f->r = op.kind == OpKind::send ? inner_->isend(op.send, op.count, op.dtype, op.peer, op.tag)
                                   : inner_->irecv(op.recv, op.count, op.dtype, op.peer, op.tag);
    return f;
  }
  void abort(ErrorCode, const std::string& reason) override { inner_->abort(reason); }

 private:
  std::unique_ptr<Communicator> inner_;
};

using Call = RecordingCommunicator::Call;

// Replaces comm by a communicator that records every call and forwards it to comm.
inline RecordingCommunicator* recorded_by(std::unique_ptr<Communicator>& comm) {
  auto owned = std::make_unique<RecordingCommunicator>(std::move(comm));
  auto* rec = owned.get();
  comm = detail::make_communicator(std::move(owned), nullptr);
  return rec;
}

// One step of `c` on a native world of threads, every call on one group recorded: per rank, the calls.
inline std::vector<std::vector<RecordingCommunicator::Call>> record_one_step(
    const TrainConfig& c, std::unique_ptr<Communicator> ParallelGroups::*group) {
  const int n = c.dims.world();
  ThreadWorld world("native", n);
  std::vector<std::vector<RecordingCommunicator::Call>> recorded(static_cast<size_t>(n));
  world.run([&](int rank, Communicator& comm) {
    blas_single_thread();
    ResolvedRun run = resolve(c, n);
    ParallelGroups g = ParallelGroups::create(comm, c.dims);
    auto* rec = recorded_by(g.*group);
    Trainer t(run, g);
    t.step(0);
    recorded[static_cast<size_t>(rank)] = rec->calls;
  });
  return recorded;
}

}  // namespace mpcomm::parallel
