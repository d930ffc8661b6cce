// Threads-as-ranks test harness (Gloo's test/base_test.h idea): N ranks of any backend as threads of
// this process over one in-memory HashStore. Each run() starts one thread per rank and rethrows the
// first failure with its rank.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpcomm/mpcomm.h"

namespace mpcomm::testing {

class ThreadWorld {
 public:
  // hosts: optional host id per rank (emulated hosts); empty = all ranks on one host. An auto world
  // routes by mixed_auto_table() unless opts name an MPCOMM_TUNING file.
  ThreadWorld(std::string backend, int size, Options opts = {}, std::vector<std::string> hosts = {});
  ~ThreadWorld();
  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int r) { return *comms_[static_cast<size_t>(r)]; }
  const std::shared_ptr<Store>& store() const { return store_; }

  // Runs fn(rank, comm) on every rank at once; rethrows the first exception, prefixed by its rank.
  void run(const std::function<void(int, Communicator&)>& fn);
  // Same, but returns each rank's exception (null when it succeeded).
  std::vector<std::exception_ptr> run_collect(const std::function<void(int, Communicator&)>& fn);

 private:
  std::shared_ptr<Store> store_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// Backends whose ranks can be threads of one process: every available one but mpi (ranks are
// processes under mpirun) and nccl (one GPU per process; on a single GPU, one emulated host each).
std::vector<std::string> thread_backends();

// A table (file) that sends every op of an auto communicator to gloo at some sizes and to native at
// others.
std::string mixed_auto_table();

// Runs fn(rank) on `size` threads and returns each one's exception (null on success).
std::vector<std::exception_ptr> run_threads(int size, const std::function<void(int)>& fn);

// The message of an exception_ptr ("" when null).
std::string message(const std::exception_ptr& e);

// Worlds shared by a test binary, created on first use and kept for its lifetime (creating one
// costs a store rendezvous and a shared-memory segment).
ThreadWorld& shared_world(const std::string& backend, int size);

}  // namespace mpcomm::testing
