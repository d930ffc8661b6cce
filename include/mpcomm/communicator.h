// mpcomm/communicator.h — one process's handle on a group of ranks.
//
// One Communicator class serves every backend (native, gloo, mpi, nccl). Each public call fills an Op
// and goes through one checked entry point that validates the arguments (before any traffic), stamps
// the op with its sequence number and fingerprint, times it, records it, and only then hands it to the
// backend behind it.
//
// Rules common to all collectives:
//  - count is in elements; count 0 is allowed and moves nothing.
//  - in place: allreduce/reduce with send == recv; allgather with send == recv + rank*count;
//    reduce_scatter with recv == send + rank*count; gather (at root) with send == recv + root*count;
//    scatter (at root) with recv == send + root*count; alltoall with send == recv; allgatherv with
//    send == recv + recv_displs[rank()]. alltoallv has no in-place form.
//  - after an error (timeout, peer failure, mismatch) the communicator is aborted: every later call
//    throws at once with the original reason.
//
// Blocking and non-blocking calls (the i-ops return a Request):
//  - ops on one communicator run in the order they were issued, blocking and non-blocking mixed, like
//    work on one CUDA stream: a collective starts once every op issued before it has; a send or receive
//    is posted then and completes as its peer allows (so a ring of isend + irecv never deadlocks).
//  - non-blocking ops make progress while the caller computes, on a progress thread of the
//    communicator's own (started by the first non-blocking call); no test() calls are needed. An op
//    is left to its caller for 100 us after the call (a caller that waits on it by then runs it itself,
//    with no hand-over between threads), so one nobody waits on starts 0.1 to 2 ms after the call; one
//    with a completion callback (Request::on_complete) starts at once.
//  - the buffer rule: an i-op's buffers belong to the communicator from the call until its Request
//    completes (wait() returned or test() returned true): do not write them (nor read a receive buffer)
//    before.
//  - the thread rule: one thread at a time issues calls on a communicator and waits on its Requests
//    (several communicators may be used from several threads at once); abort() may come from any thread.
//  - a Request's wait() throws the op's error, of the same kind and message as the blocking call would;
//    its timeout runs from the moment the op starts. After an abort every pending and later request fails
//    at once.
//  - destroying a communicator first lets the collectives and sends already issued finish (each bounded
//    by the timeout); receives that nobody waited for are dropped.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#if __cplusplus >= 202002L
#include <span>
#endif

#include "mpcomm/error.h"
#include "mpcomm/export.h"
#include "mpcomm/store.h"
#include "mpcomm/types.h"

namespace mpcomm {

// The collectives and point-to-point operations, as recorded and fingerprinted.
enum class OpKind : uint8_t {
  allreduce, broadcast, reduce, allgather, reduce_scatter, gather, scatter, alltoall,
  barrier, send, recv, split, alltoallv, allgatherv
};
inline constexpr int kNumOpKinds = 14;
MPCOMM_API std::string_view to_string(OpKind k);

// The peer of a receive that takes a message from any rank (Communicator::recv).
inline constexpr int kAnySource = -1;

// Which host each rank runs on (hosts numbered in order of their lowest rank).
struct Topology {
  std::vector<int> host_of_rank;       // host index of every rank
  std::vector<std::string> host_names; // host id of each host index
  int host = 0;                        // this rank's host index
  int local_rank = 0;                  // index among the ranks of this host
  int local_size = 1;                  // ranks on this host
  int num_hosts() const { return static_cast<int>(host_names.size()); }
};

struct MPCOMM_API Options {
  // Bound on every blocking wait. Defaults to MPCOMM_TIMEOUT seconds (300 when unset).
  Millis timeout{0};
  // Which host this rank is on. Defaults to MPCOMM_HOST_ID, else the hostname.
  std::string host_id;
  // Job token presented on every connection. Defaults to MPCOMM_TOKEN.
  std::string token;
  // Address to bind listening sockets to and to advertise to the other ranks. When empty: MPCOMM_ADDR;
  // else the first address of the interfaces MPCOMM_IFNAME selects (NCCL_SOCKET_IFNAME's syntax:
  // "eth0", "=eth0", "^lo,docker"); else the local address that routes to the rendezvous store's host
  // (or MASTER_ADDR), when that host is not this machine's loopback; else 127.0.0.1.
  std::string bind_addr;
  // Where the caller's buffers live. Defaults to MPCOMM_DEVICE (cpu). On cuda the nccl backend takes
  // the device buffers as they are; the CPU backends copy them through page-locked host memory (in
  // before the op, out after), so results are ready in device memory when the call returns.
  Device device;
  // Exchange a fingerprint of every collective before running it, so that ranks which called
  // different collectives (or the same one with different count, dtype, op or root) fail with a
  // Mismatch naming both calls, whatever the backend. Costs one small allgather per collective.
  // -1: MPCOMM_CHECK (default 0).
  int check = -1;
  // 1: the CPU backends copy host buffers through their staging buffer, exactly as they do cuda buffers,
  // so the staging path is tested without a GPU. -1: MPCOMM_STAGING (default 0).
  int staging = -1;
  // 1: sums and averages of floating-point values (allreduce, reduce_scatter, reduce; blocking or not) give the
  // same bits whatever the algorithm, backend, host layout, chunking, rank order or number of ranks
  // (docs/reproducible.md: exact integer sums of each value's bits in a window under the largest). On one host
  // native sums every rank's values in one pass; elsewhere it costs an extra max all-reduce of one byte per
  // element and int64 traffic. -1: MPCOMM_REPRODUCIBLE (default 0).
  int reproducible = -1;
  // 1: a failure ends this communicator (and those split from it) only, not the job: it is not published as the
  // job's abort, so the survivors can shrink() it and go on (docs/reliability.md). `mpcomm launch --elastic`
  // sets MPCOMM_ELASTIC=1. -1: MPCOMM_ELASTIC (default 0).
  int elastic = -1;
  // MPCOMM_* knobs for this communicator (and those split from it) only, over the environment's:
  // {"MPCOMM_SINGLE_COPY", "0"}. `mpcomm info` lists the knobs; an unknown name is an InvalidArgument.
  std::map<std::string, std::string> params;
  // Fills every unset field from the environment.
  Options resolved() const;
};

// Time and bytes spent per op kind since the communicator was created.
struct OpStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;  // bytes of the caller's buffer(s) per call, summed
  double seconds = 0;
  // What the last call of this kind ran: the backend's algorithm or library call ("ring",
  // "MPI_Allreduce"; auto: "BACKEND/ALGORITHM"), null before the first. A string that lives as long as
  // the program.
  const char* algorithm = nullptr;
};

// A read-only view of sizes (counts or displacements, one per rank): std::span<const size_t> for
// programs built as C++17 too (this header is C++17; PyTorch extensions are built so). Made from a
// std::vector, std::array or C array of size_t, (pointer, size), or in C++20 a std::span.
// It does not own the sizes: they must live for the call (the uneven i-ops copy them at the call).
class SizeSpan {
 public:
  constexpr SizeSpan() = default;
  constexpr SizeSpan(const size_t* data, size_t size) : data_(data), size_(size) {}
  SizeSpan(const std::vector<size_t>& v) : data_(v.data()), size_(v.size()) {}
  template <size_t N>
  constexpr SizeSpan(const std::array<size_t, N>& a) : data_(a.data()), size_(N) {}
  template <size_t N>
  constexpr SizeSpan(const size_t (&a)[N]) : data_(a), size_(N) {}
#if __cplusplus >= 202002L
  constexpr SizeSpan(std::span<const size_t> s) : data_(s.data()), size_(s.size()) {}
#endif
  constexpr const size_t* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr size_t operator[](size_t i) const { return data_[i]; }
  constexpr const size_t* begin() const { return data_; }
  constexpr const size_t* end() const { return data_ + size_; }

 private:
  const size_t* data_ = nullptr;
  size_t size_ = 0;
};

namespace detail {
struct Op;
class RequestState;
class Backend;
class FrontDoor;
}  // namespace detail

// A non-blocking operation. wait() blocks (bounded by the timeout) until it completes and rethrows its
// error; test() makes progress where it can and returns whether it completed. Waiting again on a
// completed Request returns (or throws) the same at once. wait() and test() may come from another
// thread than the one that issues calls on the communicator.
class MPCOMM_API Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<detail::RequestState> s) : state_(std::move(s)) {}
  void wait();
  bool test();
  // Calls fn once when the operation ends, with its error (null on success): at once on this thread when
  // it has ended already, else on the thread that ends it (the communicator's progress thread, or a
  // thread in wait()/test()). Nobody needs to wait: the progress thread completes every operation (it
  // tests sends and receives between naps). fn must be short and must not call into the communicator;
  // hand the news to another thread for anything more. One callback per Request; a second replaces
  // none and throws InvalidArgument.
  void on_complete(std::function<void(std::exception_ptr)> fn);
  // The rank a receive's message came from (for a receive from kAnySource, the sender it matched), once the
  // receive has completed; -1 before that and for every other op.
  int source() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::RequestState> state_;
};

class MPCOMM_API Communicator final {
 public:
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string_view backend() const { return backend_; }
  const Topology& topology() const { return topology_; }
  const Options& options() const { return options_; }
  // Number of collectives issued so far (the next one gets this number).
  uint64_t sequence() const;
  // Calls, bytes and time per op kind so far (ops that completed).
  std::array<OpStats, kNumOpKinds> stats() const;

  void allreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op);
  void broadcast(void* buf, size_t count, DataType dt, int root);
  // recv is significant at root only (may be null elsewhere).
  void reduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root);
  // recv holds size()*count elements, rank r's block at r*count.
  void allgather(const void* send, void* recv, size_t count, DataType dt);
  // send holds size()*count elements; rank r receives the reduction of every rank's block r.
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dt, ReduceOp op);
  // recv (size()*count, at root only) gets rank r's send at block r.
  void gather(const void* send, void* recv, size_t count, DataType dt, int root);
  // send (size()*count, at root only): block r goes to rank r.
  void scatter(const void* send, void* recv, size_t count, DataType dt, int root);
  // send and recv hold size()*count elements; block p of send goes to rank p, arriving there at
  // block rank().
  void alltoall(const void* send, void* recv, size_t count, DataType dt);
  void barrier();

  // Uneven collectives (PyTorch's all_to_all_single with split sizes, all_gather of uneven tensors).
  // Counts and displacements are in elements, one entry per rank (size() each, else InvalidArgument);
  // the arrays are copied at the call, so an i-op's may go away once it returns. Every receive region
  // (recv + displs[p], counts[p] elements) is apart from every other and from the send region, but for
  // allgatherv in place.
  // alltoallv: send_counts[p] elements from send + send_displs[p] go to rank p, where they land at
  //   recv + recv_displs[rank()]; recv_counts[p] must equal what p sends here (send_counts[rank()] on p),
  //   else every rank fails with a Mismatch naming both ranks.
  void alltoallv(const void* send, SizeSpan send_counts, SizeSpan send_displs, void* recv, SizeSpan recv_counts,
                 SizeSpan recv_displs, DataType dt);
  // allgatherv: every rank sends send_count elements; rank p's land at recv + recv_displs[p]
  //   (recv_counts[p] elements). recv_counts is the same on every rank (else a Mismatch naming both
  //   ranks), with recv_counts[rank()] == send_count; recv_displs may differ between ranks. In place:
  //   send == recv + recv_displs[rank()].
  void allgatherv(const void* send, size_t send_count, void* recv, SizeSpan recv_counts, SizeSpan recv_displs,
                  DataType dt);

  // The same collectives, non-blocking (see the rules at the top of this file).
  Request iallreduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op);
  Request ibroadcast(void* buf, size_t count, DataType dt, int root);
  Request ireduce(const void* send, void* recv, size_t count, DataType dt, ReduceOp op, int root);
  Request iallgather(const void* send, void* recv, size_t count, DataType dt);
  Request ireduce_scatter(const void* send, void* recv, size_t count, DataType dt, ReduceOp op);
  Request igather(const void* send, void* recv, size_t count, DataType dt, int root);
  Request iscatter(const void* send, void* recv, size_t count, DataType dt, int root);
  Request ialltoall(const void* send, void* recv, size_t count, DataType dt);
  Request ibarrier();
  Request ialltoallv(const void* send, SizeSpan send_counts, SizeSpan send_displs, void* recv, SizeSpan recv_counts,
                     SizeSpan recv_displs, DataType dt);
  Request iallgatherv(const void* send, size_t send_count, void* recv, SizeSpan recv_counts, SizeSpan recv_displs,
                      DataType dt);

  // Point to point. A receive must name the same count and dtype the sender sent; messages from one
  // peer with one tag arrive in the order they were sent. A receive from kAnySource takes the first
  // message with its tag from whichever rank (receives match in the order they were posted, from-any
  // and from-one alike; a message that arrived before them, the earliest such); recv() returns the
  // rank it came from, Request::source() tells it for irecv(). Backends without such a receive (nccl)
  // refuse it with InvalidArgument.
  void send(const void* buf, size_t count, DataType dt, int peer, int tag = 0);
  int recv(void* buf, size_t count, DataType dt, int peer, int tag = 0);
  Request isend(const void* buf, size_t count, DataType dt, int peer, int tag = 0);
  Request irecv(void* buf, size_t count, DataType dt, int peer, int tag = 0);

  // Collective over this communicator: ranks with the same color form a new communicator, ordered
  // by (key, old rank). A negative color returns nullptr (the rank joins no group).
  std::unique_ptr<Communicator> split(int color, int key);

  // After a failure (an op threw PeerFailure or Timeout), on every survivor: a new communicator over the ranks
  // still alive, in their old order, numbered from 0. The survivors agree on who is gone through the store
  // (a rank is gone when it is known dead — on this host, its process — or has not called shrink() within the
  // timeout); this communicator is revoked first: its pending and later calls fail with Revoked. With
  // `exclude`, the named ranks leave on purpose (also from a healthy communicator): every rank calls it, the
  // excluded get nullptr. A rank counted out (it came after the others had agreed) gets PeerFailure.
  // Needs Options::elastic after a failure (else the failure ended the job); native and gloo (mpi and nccl:
  // Unsupported). Children made by split() are revoked when their own ops fail, and shrink the same way.
  std::unique_ptr<Communicator> shrink(const std::vector<int>& exclude = {});

  // Collective over a healthy communicator: a new communicator of size() + n ranks — this one's ranks first, in
  // their order, then n processes that called mpcomm::join(), in the order they came. Waits for them up to the
  // timeout (then Timeout on every rank). This communicator stays as it was. Native and gloo.
  std::unique_ptr<Communicator> grow(int n);

  // Aborts the communicator: pending and later calls throw; peers blocked on this rank fail soon after.
  // Any thread may call it.
  void abort(const std::string& reason);

  // The flight recorder's text: the last MPCOMM_TRACE_ENTRIES operations with their state and times.
  // Written to stderr (or MPCOMM_TRACE_DIR) by itself when an operation fails with a timeout, a peer
  // failure or a mismatch.
  std::string flight_record() const;

 private:
  friend class detail::FrontDoor;
  MPCOMM_HIDDEN explicit Communicator(std::shared_ptr<detail::FrontDoor> core);  // made by the library only
  std::shared_ptr<detail::FrontDoor> core_;
  // Copies of the backend's, for the inline accessors.
  std::string backend_;
  int rank_;
  int size_;
  Topology topology_;
  Options options_;
};

// Backends compiled into this build and usable on this machine ("native", ...; "nccl" only with a GPU).
MPCOMM_API std::vector<std::string> available_backends();
// Backends compiled into this build, usable here or not.
MPCOMM_API std::vector<std::string> compiled_backends();

// Creates a communicator of `backend` over ranks that share `store` (pass a PrefixStore to keep
// several communicators or backends apart on one store). Blocks until all `size` ranks joined.
MPCOMM_API std::unique_ptr<Communicator> create(std::string_view backend, std::shared_ptr<Store> store,
                                                int rank, int size, const Options& opts = {});

// A process joining a running job whose ranks share `job_store` (any store of the job: its root is used) and
// the job's secret (opts.token / MPCOMM_TOKEN): it waits, up to the timeout, for the ranks to grow() and
// returns its communicator there, with the next rank — or nullptr once a rank of the job has called
// close_joins() (no grow() will seat it).
MPCOMM_API std::unique_ptr<Communicator> join(std::shared_ptr<Store> job_store, const Options& opts = {});

// join() for a process that holds a communicator of the job already (one it left: a shrink left it out of the
// group that went on): with that communicator's store and options.
MPCOMM_API std::unique_ptr<Communicator> join(Communicator& member);

// Says to the processes waiting in join() on `member`'s job, and to those that come later, that no grow() will
// seat them: their join() returns nullptr. A job that grows from time to time calls it before it ends.
MPCOMM_API void close_joins(Communicator& member);

// How many processes wait in join() on `member`'s job and no grow() has taken yet (rank 0 of a communicator
// asks it, then tells the others how many to grow() by).
MPCOMM_API int64_t waiting_joiners(Communicator& member);

// Reads rank, size and rendezvous from the environment: mpcomm launch (MPCOMM_STORE), torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI
// (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). The backend is
// MPCOMM_BACKEND (default native). With MPCOMM_JOIN=1 (a rank started again by mpcomm launch --max-restarts)
// it joins the running job instead: join() on the job's store, nullptr when the job has closed its joins.
MPCOMM_API std::unique_ptr<Communicator> init_from_env(const Options& opts = {});

}  // namespace mpcomm
