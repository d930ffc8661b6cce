// Each mpcomm op as NCCL calls: the collectives (grouped ncclSend/ncclRecv where NCCL has none), sends and
// receives posted, flushed and waited for, and host buffers staged through GPU memory (nccl_calls.h).
#include "backends/nccl/nccl_calls.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "backends/nccl/nccl_runtime.h"

namespace mpcomm::nccl {

// ---- collectives ---------------------------------------------------------------------------------

const char* nccl_call(OpKind k) {
  switch (k) {
    case OpKind::allreduce: return "ncclAllReduce";
    case OpKind::broadcast: return "ncclBroadcast";
    case OpKind::reduce: return "ncclReduce";
    case OpKind::allgather: return "ncclAllGather";
    case OpKind::reduce_scatter: return "ncclReduceScatter";
    case OpKind::gather: return "grouped ncclRecv (root) / ncclSend";
    case OpKind::scatter: return "grouped ncclSend (root) / ncclRecv";
    case OpKind::alltoall: return "grouped ncclSend/ncclRecv";
    case OpKind::barrier: return "ncclAllReduce of one int32";
    case OpKind::alltoallv:
    case OpKind::allgatherv: return "grouped ncclSend/ncclRecv";
    default: return "nccl";
  }
}

void enqueue_op(CommState& st, const Op& op, const ErrorSubject& what, net::Deadline deadline, char* tmp) {
  cudaStream_t stream = st.stream;
  const ncclDataType_t dt = nccl_type(op.dtype);
  const size_t bytes = op.bytes();
  const int n = st.size, me = st.rank;  // the backend's rank() and size(): it is made from this state
  const char* s = static_cast<const char*>(op.send);
  char* r = static_cast<char*>(op.recv);
  auto block = [&](const char* base, int i) { return base + static_cast<size_t>(i) * bytes; };
  // This rank's own block of gather/scatter/alltoall: a device-to-device copy on the NCCL stream, none in
  // place.
  auto copy_own = [&](void* dst, const void* src) {
    if (dst == src) return;
    st.cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), what,
            "cudaMemcpyAsync (device to device)");
  };

  switch (op.kind) {
    case OpKind::allreduce:
      return st.enqueue(what, "ncclAllReduce", deadline, [&](ncclComm_t c) {
        return ncclAllReduce(s, r, op.count, dt, nccl_op(op.redop), c, stream);
      });
    case OpKind::broadcast:
      return st.enqueue(what, "ncclBroadcast", deadline,
                        [&](ncclComm_t c) { return ncclBroadcast(r, r, op.count, dt, op.root, c, stream); });
    case OpKind::reduce: {
      // NCCL writes recvbuff at the root only; elsewhere it gets the send buffer, so that every pointer it
      // sees is device memory (recv may be null or host memory there).
      void* out = me == op.root ? static_cast<void*>(r) : const_cast<char*>(s);
      return st.enqueue(what, "ncclReduce", deadline, [&](ncclComm_t c) {
        return ncclReduce(s, out, op.count, dt, nccl_op(op.redop), op.root, c, stream);
      });
    }
    case OpKind::allgather:  // in place (send == recv + rank*count) is NCCL's own in-place layout
      return st.enqueue(what, "ncclAllGather", deadline,
                        [&](ncclComm_t c) { return ncclAllGather(s, r, op.count, dt, c, stream); });
    case OpKind::reduce_scatter:  // in place (recv == send + rank*count) likewise
      return st.enqueue(what, "ncclReduceScatter", deadline, [&](ncclComm_t c) {
        return ncclReduceScatter(s, r, op.count, dt, nccl_op(op.redop), c, stream);
      });
    case OpKind::gather:
      // Point to point in one group (the root receives from every other rank), as NCCL's own docs compose it.
      if (me == op.root) copy_own(r + static_cast<size_t>(me) * bytes, s);
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        if (me != op.root) {
          call = "ncclSend";
          return ncclSend(s, op.count, dt, op.root, c, stream);
        }
        call = "ncclRecv";
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          ncclResult_t x = ncclRecv(r + static_cast<size_t>(p) * bytes, op.count, dt, p, c, stream);
          if (!ok(x)) return x;
        }
        return ncclSuccess;
      });
    case OpKind::scatter:
      if (me == op.root) copy_own(r, block(s, me));
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        if (me != op.root) {
          call = "ncclRecv";
          return ncclRecv(r, op.count, dt, op.root, c, stream);
        }
        call = "ncclSend";
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          ncclResult_t x = ncclSend(block(s, p), op.count, dt, p, c, stream);
          if (!ok(x)) return x;
        }
        return ncclSuccess;
      });
    case OpKind::alltoall: {
      // In place, block p is sent and received at once: send from a copy of the input instead.
      const char* src = s;
      if (op.send == op.recv) {
        st.cuda(cudaMemcpyAsync(tmp, s, bytes * static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream), what,
                "cudaMemcpyAsync (device to device)");
        src = tmp;
      } else {
        copy_own(r + static_cast<size_t>(me) * bytes, block(s, me));
      }
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          call = "ncclSend";
          ncclResult_t x = ncclSend(block(src, p), op.count, dt, p, c, stream);
          if (!ok(x)) return x;
          call = "ncclRecv";
          x = ncclRecv(r + static_cast<size_t>(p) * bytes, op.count, dt, p, c, stream);
          if (!ok(x)) return x;
        }
        return ncclSuccess;
      });
    }
    case OpKind::alltoallv:
    case OpKind::allgatherv: {
      // Every block to its rank and every rank's block from it, in one group; empty blocks are left out
      // on both sides (the front door checked every rank's counts against the others', so both sides
      // agree which are empty). allgatherv sends its one block to every rank.
      const detail::VCounts& v = *op.v;
      const size_t es = dtype_size(op.dtype);
      const bool a2a = op.kind == OpKind::alltoallv;
      const auto me_i = static_cast<size_t>(me);
      auto out = [&](size_t p) { return r + v.recv_displs[p] * es; };
      auto in = [&](size_t p) { return a2a ? s + v.send_displs[p] * es : s; };
      auto sends = [&](size_t p) { return a2a ? v.send_counts[p] : op.count; };
      if (v.recv_counts[me_i] > 0 && out(me_i) != in(me_i))
        st.cuda(cudaMemcpyAsync(out(me_i), in(me_i), v.recv_counts[me_i] * es, cudaMemcpyDeviceToDevice, stream), what,
                "cudaMemcpyAsync (device to device)");
      return st.enqueue_group(what, deadline, [&](ncclComm_t c, const char*& call) {
        for (int q = 0; q < n; ++q) {
          const auto p = static_cast<size_t>(q);
          if (q == me) continue;
          if (sends(p) > 0) {
            call = "ncclSend";
            ncclResult_t x = ncclSend(in(p), sends(p), dt, q, c, stream);
            if (!ok(x)) return x;
          }
          if (v.recv_counts[p] > 0) {
            call = "ncclRecv";
            ncclResult_t x = ncclRecv(out(p), v.recv_counts[p], dt, q, c, stream);
            if (!ok(x)) return x;
          }
        }
        return ncclSuccess;
      });
    }
    case OpKind::barrier:
      // An allreduce of one int32 in the scratch word: every rank must have arrived before any completes.
      return st.enqueue(what, "ncclAllReduce (barrier)", deadline,
                        [&](ncclComm_t c) { return ncclAllReduce(tmp, tmp, 1, ncclInt32, ncclSum, c, stream); });
    default:
      throw Internal("mpcomm: " + what.str() + ": the nccl backend has no collective for this op");
  }
}

// ---- point to point -------------------------------------------------------------------------------

// Device memory only: host buffers are staged by the front door (DeviceStaging below).
void P2PRequest::start() {
  if (op_.count == 0) {  // nothing to move, on either side: no NCCL call
    done_ = true;
    return;
  }
  CommState& st = *st_;
  st.make_current(what_);
  const bool send = op_.kind == OpKind::send;
  auto slot = std::make_shared<P2PSlot>();
  slot->send = send;
  slot->buf = const_cast<void*>(send ? op_.send : op_.recv);
  slot->count = op_.count;
  slot->dt = nccl_type(op_.dtype);
  slot->peer = op_.peer;
  slot_ = std::move(slot);
  st.post(slot_);
}

void P2PRequest::wait() {
  if (done_) return;
  CommState& st = *st_;
  st.throw_if_aborted(what_);
  st.make_current(what_);
  const auto deadline = net::deadline_after(st.timeout);
  if (!slot_->done) st.flush(what_, deadline);
  cudaEvent_t ev = slot_->done.get();
  st.poll(what_, "the operation to complete on the GPU", call(), deadline,
          [&](ncclResult_t) { return st.query(cudaEventQuery(ev), what_, "cudaEventQuery"); });
  slot_.reset();  // its batch's event goes back to the pool with the batch's last request
  done_ = true;
}

bool P2PRequest::test() {
  if (done_) return true;
  CommState& st = *st_;
  st.throw_if_aborted(what_);
  st.make_current(what_);
  const auto deadline = net::deadline_after(st.timeout);
  if (!slot_->done) st.flush(what_, deadline);
  (void)st.async_state(what_);
  st.maybe_poll_abort_key(what_);
  if (!st.query(cudaEventQuery(slot_->done.get()), what_, "cudaEventQuery")) return false;
  slot_.reset();
  done_ = true;
  return true;
}

// ---- staging: host buffers through GPU memory ----------------------------------------------------------

DeviceStaging::DeviceStaging(CommState& st) : st_(st), what_("nccl staging on rank " + std::to_string(st.rank)) {}

DeviceStaging::~DeviceStaging() {
  if (area_ != nullptr) st_.defer_free(area_);
}

char* DeviceStaging::area(size_t bytes) {
  if (bytes <= area_bytes_) return area_;
  const size_t want = std::max(bytes, area_bytes_ * 2);
  void* p = st_.alloc_staging(want, what_);
  // The old block is idle: collectives complete before they return, and only collectives use it.
  if (area_ != nullptr) st_.free_staging(area_);
  area_ = static_cast<char*>(p);
  area_bytes_ = want;
  return area_;
}

void DeviceStaging::copy_in(char* staged, const void* user, size_t n) {
  st_.cuda(cudaMemcpyAsync(staged, user, n, cudaMemcpyHostToDevice, st_.copy_stream), what_,
           "cudaMemcpyAsync (host to device)");
}

void DeviceStaging::ready() { st_.order_after_copies(what_); }

void DeviceStaging::copy_out(void* user, const char* staged, size_t n) {
  st_.cuda(cudaMemcpyAsync(user, staged, n, cudaMemcpyDeviceToHost, st_.copy_stream), what_,
           "cudaMemcpyAsync (device to host)");
  st_.wait_stream(st_.copy_stream, what_, "the result to reach host memory", net::deadline_after(st_.timeout));
}

char* DeviceStaging::alloc(size_t n) { return static_cast<char*>(st_.alloc_staging(n, what_)); }

void DeviceStaging::release(char* p, bool maybe_in_use) noexcept {
  // Still queued or in flight: it may yet be used, so it goes at teardown.
  if (maybe_in_use)
    st_.defer_free(p);
  else
    st_.free_staging(p);
}

}  // namespace mpcomm::nccl
