// The mpi backend's sends and receives: MPI_Isend / MPI_Irecv in chunks MPI's int counts can carry,
// completed by the communicator's bounded wait; a receive must get exactly the count it named.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/mpi/comm_state.h"
#include "core/op.h"

namespace mpcomm::mpi {

using detail::Op;

class MpiRequest : public detail::RequestState {
 public:
  MpiRequest(std::shared_ptr<CommState> st, const Op& op, ErrorSubject what)
      : st_(std::move(st)),
        op_(op),
        what_(std::move(what)),
        call_(op.kind == OpKind::send ? "MPI_Isend" : "MPI_Irecv") {}

  // Posts every chunk; on failure the communicator is aborted. A receive from any source is one chunk
  // (one MPI message): two such receives in flight could each take a chunk of the other's message.
  void start() {
    const MPI_Datatype type = mpi_type(op_.dtype);
    const size_t es = dtype_size(op_.dtype), chunk = st_->chunk_elements(es);
    const bool any = op_.kind == OpKind::recv && op_.peer == kAnySource;
    if (any && op_.count > chunk)
      throw Unsupported("mpcomm: " + what_.str() + ": the mpi backend receives from any source at most " +
                        std::to_string(chunk) + " elements (one MPI message); name the sender for more");
    const int peer = any ? MPI_ANY_SOURCE : op_.peer;
    size_t off = 0;
    try {
      do {
        const size_t n = std::min(chunk, op_.count - off);
        st_->post(reqs_, what_, call_, [&](MPI_Request* r) {
          return op_.kind == OpKind::send ? MPI_Isend(static_cast<const char*>(op_.send) + off * es,
                                                      static_cast<int>(n), type, peer, op_.tag, st_->comm, r)
                                          : MPI_Irecv(static_cast<char*>(op_.recv) + off * es, static_cast<int>(n),
                                                      type, peer, op_.tag, st_->comm, r);
        });
        expected_.push_back(static_cast<int>(n));
        off += n;
      } while (off < op_.count);
    } catch (const Error& e) {
      st_->abort(e.what());
      throw;
    }
    statuses_.resize(reqs_.size());
  }

  void wait() override {
    if (done_) return;
    throw_if_aborted();
    try {
      st_->wait(reqs_, &statuses_, what_, call_);
      finish();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::timeout) cancel_receives();
      st_->abort(e.what());
      throw;
    }
  }

  int source() const override { return done_ ? source_ : -1; }

  bool test() override {
    if (done_) return true;
    throw_if_aborted();
    try {
      if (!st_->test(reqs_, &statuses_, what_, call_)) return false;
      finish();
      return true;
    } catch (const Error& e) {
      st_->abort(e.what());
      throw;
    }
  }

 private:
  void throw_if_aborted() {
    std::string why = st_->abort_reason();
    if (!why.empty()) throw PeerFailure("mpcomm: " + what_.str() + ": communicator was aborted: " + why);
  }

  // A receive must get exactly the count it named (MPI itself only catches a longer message).
  void finish() {
    if (op_.kind == OpKind::recv) {
      source_ = statuses_.front().MPI_SOURCE;
      const MPI_Datatype type = mpi_type(op_.dtype);
      for (size_t i = 0; i < statuses_.size(); ++i) {
        int got = 0;
        st_->check(MPI_Get_count(&statuses_[i], type, &got), what_, "MPI_Get_count");
        if (got != expected_[i])
          throw Mismatch("mpcomm: " + what_.str() + ": rank " + std::to_string(source_) + " sent " +
                         std::to_string(got) + " elements where " + std::to_string(expected_[i]) + " were expected");
      }
    }
    done_ = true;
  }

  // After a timeout, keep MPI from writing into the caller's buffer later (best effort: a receive that
  // already matched a message cannot be cancelled).
  void cancel_receives() {
    if (op_.kind != OpKind::recv) return;
    {
      auto g = Runtime::get().guard();
      for (MPI_Request& r : reqs_)
        if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    }
    try {
      for (int i = 0; i < 1000 && !st_->test(reqs_, nullptr, what_, call_); ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    } catch (const Error&) {
    }
  }

  std::shared_ptr<CommState> st_;
  Op op_;
  ErrorSubject what_;
  const char* call_;
  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> statuses_;
  std::vector<int> expected_;  // elements per chunk
  int source_ = -1;            // a receive's sender, once it completed
  bool done_ = false;
};

}  // namespace mpcomm::mpi
