// The internal interface every backend implements (native, gloo, mpi, nccl, and backends made of
// backends). The public Communicator (core/communicator.cc) is the only caller: it validates each op,
// numbers, fingerprints, times and records it, stages buffers that live in other memory, and orders
// blocking and non-blocking calls. A backend therefore only ever sees validated ops, one at a time
// (never two calls into one backend at once; possibly from different threads, one after the other),
// and never checks an argument itself.
//
// What a backend must do:
//  - run(): one collective to completion, bounded by options().timeout; on a timeout, a dead peer or a
//    mismatch it throws the mpcomm::Error of that kind whose message starts with describe(op).
//  - start(): a send or receive, returning its state; its wait() is bounded the same way.
//  - abort(): record the first failure and tell the peers (so that ranks blocked on this one fail soon),
//    callable from any thread.
//  - set op.algorithm to what it runs (the flight recorder shows it).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/op.h"
#include "mpcomm/communicator.h"

namespace mpcomm::detail {

class StagingMemory;

// Where memory is, as a backend sees it.
enum class MemoryType : uint8_t { host, device };

class Backend;
// Creates a backend over ranks that share `store` (what create() calls for one backend name).
using BackendFactory = std::unique_ptr<Backend> (*)(std::shared_ptr<Store> store, int rank, int size,
                                                    const Options& opts);

// What the front door worked out for a split (once, for every backend): every rank's (color, key) came
// through this communicator's allgather.
struct SplitPlan {
  int color = -1;                 // negative: this rank joins no group (but still takes part)
  int key = 0;
  std::vector<int> members;       // parent ranks of this rank's group, in new-rank order (key, then old rank)
  int new_rank = -1;
  std::shared_ptr<Store> store;   // private to the group: "split<seq>/color<color>" under the parent's store
  Topology topology;              // the group's hosts
  uint64_t seq = 0;               // sequence number of the split's allgather
  BackendFactory recreate = nullptr;  // the factory that made the parent
};

class Backend;

// What an error message names, built only when a message is: an op on a backend ("allreduce #3 (...) on
// rank 1 of 4 [mpi]"), or a fixed text (setup, split). Keeps strings off the paths of ops that succeed.
class ErrorSubject {
 public:
  ErrorSubject(const Op& op, const Backend& b) : op_(&op), b_(&b) {}
  explicit ErrorSubject(std::string text) : text_(std::move(text)) {}
  std::string str() const;

 private:
  const Op* op_ = nullptr;
  const Backend* b_ = nullptr;
  std::string text_;
};

class Backend {
 public:
  Backend(std::string name, int rank, int size, Topology topo, Options opts, std::shared_ptr<Store> store);
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  std::string_view name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Topology& topology() const { return topology_; }
  const Options& options() const { return options_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  // "allreduce #12 (count 1000, float32, sum) on rank 1 of 4 [native]": the start of every error.
  std::string describe(const Op& op) const { return detail::describe(op, rank_, size_, name_); }

  // Runs one validated collective to completion.
  virtual void run(const Op& op) = 0;
  // Starts a validated send or receive.
  virtual std::shared_ptr<RequestState> start(const Op& op) = 0;
  // Records the first failure and publishes it to the peers. `code` is the failure's kind, so that
  // peers can raise the same kind (a Mismatch stays a Mismatch). Any thread; idempotent.
  virtual void abort(ErrorCode code, const std::string& reason) = 0;
  // The communicator in front is going away (requests may still hold this backend): tell local peers
  // that this rank is done, so that they stop waiting for it.
  virtual void close() {}
  // The backend of this rank's group, or null when plan.color < 0. Collective over this backend: every
  // rank calls it, also those that join no group. The default creates a fresh backend of the same kind
  // on plan.store; a backend with its own split (MPI_Comm_split, ncclCommSplit) overrides it.
  virtual std::unique_ptr<Backend> split(const SplitPlan& plan);

  // Whether the backend fails every receive that gets another size than it expects (native frames carry
  // their size). Where it does not, the front door checks the counts of every alltoallv and allgatherv
  // against the other ranks' first (one small allgather, FrontDoor::verify_counts); MPCOMM_CHECK does it on
  // every backend.
  virtual bool checks_sizes() const { return false; }
  // Whether the backend runs the reproducible sum `op` (Op::reproducible, large enough that the front door
  // would not gather it) itself, with the bits of the front door's integer collectives
  // (core/reproducible/exact.h: sum_values); every rank answers alike. Else the front door runs it.
  virtual bool runs_reproducible(const Op&) const { return false; }
  // Whether shrink() may replace this communicator (mpi: no; nccl: with NCCL 2.28+).
  virtual bool shrinks() const { return true; }
  // shrink()'s new communicator over plan.members, after the agreement; `after_failure`: this one was revoked
  // (its backend aborted) by a failure. Backends that rebuild through the store make it as split() makes a group;
  // nccl through ncclCommShrink, which the excluded ranks do not call.
  virtual std::unique_ptr<Backend> shrunk(const SplitPlan& plan, bool after_failure) {
    (void)after_failure;
    return split(plan);
  }

  // Whether start() takes a receive from kAnySource (the request's source() then names the sender).
  virtual bool receives_from_any_source() const { return true; }

  // Whether a request's test() is cheap enough for the progress thread to call it between naps, for sends
  // and receives nobody waits for yet.
  virtual bool cheap_test() const { return true; }

  // Where this backend runs buffers: host memory (the CPU backends) or the GPU (nccl).
  virtual MemoryType runs_on() const { return MemoryType::host; }
  // Where a caller's buffer lives, as this backend must treat it. The default follows the
  // communicator's options: a cuda device (or MPCOMM_STAGING=1, which exercises the staging path on a
  // CPU) makes every buffer device memory.
  virtual MemoryType memory_type(const void* buf) const;
  // True when some buffer may need staging (memory_type() can differ from runs_on()); the front door
  // then asks per buffer and op.
  virtual bool may_stage() const;
  // Memory of runs_on() kind that buffers living elsewhere are copied through. The default is
  // page-locked host memory (for the CPU backends on device buffers).
  virtual StagingMemory& staging();

 private:
  std::string name_;
  int rank_, size_;
  Topology topology_;
  Options options_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<StagingMemory> host_staging_;
};

}  // namespace mpcomm::detail
