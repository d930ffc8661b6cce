// A rank program for the mpi backend's process tests, run under `mpcomm launch --backend mpi`.
//   mpi_rank_prog grid              split 4 ranks into a 2x2 grid (rows and columns), check allreduce and
//                                   broadcast in each, and that a negative color gives no communicator
//   mpi_rank_prog mismatch          rank 0 calls allreduce, the others broadcast (run with MPCOMM_CHECK=1);
//                                   print "rank R mismatch: <error>" and exit 3
//   (topology, kill, stall and abort: tests/errors/testprog.cc, the rank program shared by every backend's tests)
//   mpi_rank_prog chunks            every chunked op (allreduce, broadcast, reduce, send/recv) with the chunk
//                                   limit forced to 1000 elements, every dtype, in and out of place
//   mpi_rank_prog bigcount          an allgather of more than INT_MAX elements per rank: Unsupported
//   mpi_rank_prog p2p               isend/irecv with tags, test(), and a receive of the wrong count
//   mpi_rank_prog anysource         receives from any source (testing/any_source_check.h)
//   mpi_rank_prog anysourcebig      with the chunk limit forced to 1000 elements, a receive from any source
//                                   of 2000: Unsupported (print "rank 0 unsupported: <error>"), and the
//                                   communicator still usable
//   mpi_rank_prog partial           write a line in two pieces, flushing in between
//   mpi_rank_prog exit CODE VICTIM  rank VICTIM exits with CODE after a barrier, the others sleep
//   mpi_rank_prog latency ITERS     print the mean time of small collectives, back to back
//   mpi_rank_prog wrongsize         create("mpi", ..., rank 0, size 2) in a world of 1: print the error
// Prints "rank R ok" when a mode passes. A rank that fails on purpose waits 0.5 s before it exits, since
// mpirun ends the whole job when the first rank exits non-zero, and the others should have printed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness/flight_record.h"
#include "mpcomm/mpcomm.h"
#include "testing/any_source_check.h"
#include "testing/collective_check.h"

using namespace mpcomm;

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int grid(Communicator& world) {
  require(world.size() == 4, "grid needs 4 ranks");
  const int r = world.rank();
  auto row = world.split(r / 2, r % 2);  // {0,1} {2,3}
  auto col = world.split(r % 2, r / 2);  // {0,2} {1,3}
  require(row && col, "split returned a communicator");
  require(row->backend() == "mpi" && row->size() == 2 && row->rank() == r % 2, "row rank/size");
  require(col->size() == 2 && col->rank() == r / 2, "column rank/size");
  int32_t v = r, sum = 0;
  row->allreduce(&v, &sum, 1, DataType::int32, ReduceOp::sum);
  require(sum == (r / 2) * 4 + 1, "row sum " + std::to_string(sum));
  col->allreduce(&v, &sum, 1, DataType::int32, ReduceOp::sum);
  require(sum == (r % 2) * 2 + 2, "column sum " + std::to_string(sum));
  int32_t b = r;
  col->broadcast(&b, 1, DataType::int32, 1);
  require(b == (r % 2) + 2, "column broadcast " + std::to_string(b));
  // Reversed keys reverse the order; color -1 joins nothing.
  auto rev = world.split(0, -r);
  require(rev && rev->rank() == 3 - r, "reversed key order");
  auto none = world.split(r == 0 ? -1 : 1, 0);
  require((r == 0) == (none == nullptr), "negative color gives nullptr");
  if (none) {
    none->allreduce(&v, &sum, 1, DataType::int32, ReduceOp::sum);
    require(sum == 6, "group without rank 0");
  }
  // The conformance cases still pass on a sub-communicator (row: 2 ranks).
  for (OpKind op : check::checked_ops())
    for (const auto& c : check::conformance_cases(op, row->size())) {
      if (c.count > 1000) continue;
      check::Result res = check::run_case(*row, c);
      require(res.wrong == 0, check::describe(c) + ": " + res.first_wrong);
    }
  std::printf("rank %d topology of row: hosts %d\n", r, row->topology().num_hosts());
  world.barrier();
  return 0;
}

// With 1000-element chunks (MPCOMM_MPI_CHUNK_ELEMENTS for this communicator), counts around chunk
// boundaries.
int chunks(Communicator& comm) {
  for (size_t count : {size_t{999}, size_t{1000}, size_t{1001}, size_t{3500}})
    for (OpKind op : {OpKind::allreduce, OpKind::broadcast, OpKind::reduce})
      for (const auto& base : check::conformance_cases(op, comm.size())) {
        if (base.count != 1) continue;  // one case per dtype × redop × placement; the count is ours
        check::Case c = base;
        c.count = count;
        check::Result res = check::run_case(comm, c);
        require(res.wrong == 0, check::describe(c) + ": " + res.first_wrong);
      }
  // send/recv across chunks: rank 0 -> every other rank, 3500 int64.
  std::vector<int64_t> buf(3500);
  if (comm.rank() == 0) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int64_t>(i) * 7 - 3;
    for (int p = 1; p < comm.size(); ++p) comm.send(buf.data(), buf.size(), DataType::int64, p, 5);
  } else {
    comm.recv(buf.data(), buf.size(), DataType::int64, 0, 5);
    for (size_t i = 0; i < buf.size(); ++i) require(buf[i] == static_cast<int64_t>(i) * 7 - 3, "p2p chunk data");
  }
  comm.barrier();
  return 0;
}

int bigcount(Communicator& comm) {
  // Never touched: the count is refused before any MPI call. In place, so the buffers may overlap.
  static char one_byte;
  const size_t count = static_cast<size_t>(INT_MAX) + 1;
  try {
    comm.alltoall(&one_byte, &one_byte, count, DataType::int8);
  } catch (const Unsupported& e) {
    std::printf("rank %d unsupported: %s\n", comm.rank(), e.what());
    // The communicator stays usable, also past the timeout (a refused blocking call must leave nothing
    // armed for the watchdog).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    int32_t v = comm.rank();
    comm.allreduce(&v, &v, 1, DataType::int32, ReduceOp::sum);
    require(v == comm.size() * (comm.size() - 1) / 2, "allreduce after the refusal");
    std::printf("rank %d usable after the refusal\n", comm.rank());
    // MPI_Alltoallv takes int displacements: one past INT_MAX is refused (each rank's one element to
    // itself, never touched), and the communicator works on.
    static char other_byte;
    std::vector<size_t> counts(static_cast<size_t>(comm.size()), 0), send_displs(counts.size(), 0);
    counts[static_cast<size_t>(comm.rank())] = 1;
    send_displs[static_cast<size_t>(comm.rank())] = count;
    try {
      comm.alltoallv(&one_byte, counts, send_displs, &other_byte, counts, std::vector<size_t>(counts.size(), 0),
                     DataType::int8);
    } catch (const Unsupported& e2) {
      std::printf("rank %d unsupported: %s\n", comm.rank(), e2.what());
      comm.allreduce(&v, &v, 1, DataType::int32, ReduceOp::sum);
      std::printf("rank %d usable after the alltoallv refusal\n", comm.rank());
      return 0;
    }
    std::printf("rank %d: no error for an alltoallv displacement of %zu\n", comm.rank(), count);
    return 1;
  }
  std::printf("rank %d: no error for an alltoall of %zu elements\n", comm.rank(), count);
  return 1;
}

int p2p(Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  require(n >= 2, "p2p needs 2 ranks");
  // A ring with two tags posted in the reverse order of sending: tags keep them apart.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  float a = static_cast<float>(r), b = static_cast<float>(r * 10), ra = -1, rb = -1;
  Request rq_b = comm.irecv(&rb, 1, DataType::float32, prev, 2);
  Request rq_a = comm.irecv(&ra, 1, DataType::float32, prev, 1);
  Request s1 = comm.isend(&a, 1, DataType::float32, next, 1);
  Request s2 = comm.isend(&b, 1, DataType::float32, next, 2);
  while (!rq_a.test()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  rq_b.wait();
  s1.wait();
  s2.wait();
  require(ra == static_cast<float>(prev) && rb == static_cast<float>(prev * 10), "tagged ring values");
  // Ordering: several messages on one tag arrive in order.
  if (r == 0) {
    for (int32_t i = 0; i < 20; ++i) comm.send(&i, 1, DataType::int32, 1, 7);
  } else if (r == 1) {
    for (int32_t i = 0; i < 20; ++i) {
      int32_t got = -1;
      comm.recv(&got, 1, DataType::int32, 0, 7);
      require(got == i, "in-order delivery");
    }
  }
  comm.barrier();
  // A receive that names more elements than were sent is a Mismatch naming both counts.
  if (r == 0) {
    int32_t three[3] = {1, 2, 3};
    comm.send(three, 3, DataType::int32, 1, 9);
  } else if (r == 1) {
    int32_t four[4] = {};
    try {
      comm.recv(four, 4, DataType::int32, 0, 9);
      require(false, "short message accepted");
    } catch (const Mismatch& e) {
      std::printf("rank %d mismatch: %s\n", r, e.what());
    }
  }
  return 0;
}

int latency(Communicator& comm, int iters) {
  float x = 1, y = 0;
  std::vector<float> xs(comm.size()), ys(comm.size());
  struct Case {
    const char* name;
    std::function<void()> call;
  } cases[] = {
      {"barrier", [&] { comm.barrier(); }},
      {"allreduce", [&] { comm.allreduce(&x, &y, 1, DataType::float32, ReduceOp::sum); }},
      {"broadcast", [&] { comm.broadcast(&x, 1, DataType::float32, 0); }},
      {"scatter", [&] { comm.scatter(xs.data(), &y, 1, DataType::float32, comm.size() - 1); }},
      {"alltoall", [&] { comm.alltoall(xs.data(), ys.data(), 1, DataType::float32); }},
  };
  for (auto& c : cases) {
    c.call();
    comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) c.call();
    double us = seconds_since(t0) * 1e6 / iters;
    if (comm.rank() == 0) std::printf("latency %s %.1f us\n", c.name, us);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  if (mode == "partial") {  // output only: no communicator
    std::printf("part1 ");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::printf("part2\n");
    std::fflush(stdout);
    return 0;
  }
  if (mode == "wrongsize") {
    try {
      create("mpi", std::make_shared<HashStore>(), 0, 2);
      std::printf("rank 0: no error\n");
      return 1;
    } catch (const InvalidArgument& e) {
      std::printf("rank 0 invalid: %s\n", e.what());
      return 0;
    }
  }
  Options opts;
  if (mode == "chunks") opts.params["MPCOMM_MPI_CHUNK_ELEMENTS"] = "1000";
  if (mode == "anysourcebig") opts.params["MPCOMM_MPI_CHUNK_ELEMENTS"] = "1000";
  auto comm = init_from_env(opts);
  const int rank = comm->rank();
  try {
    int rc = 2;
    if (mode == "grid") rc = grid(*comm);
    if (mode == "chunks") rc = chunks(*comm);
    if (mode == "bigcount") return bigcount(*comm);
    if (mode == "p2p") rc = p2p(*comm);
    if (mode == "anysource") {
      const std::string err = check::any_source_check(*comm, /*native_order=*/false);
      if (!err.empty()) std::printf("rank %d any source: %s\n", rank, err.c_str());
      rc = err.empty() ? 0 : 1;
    }
    if (mode == "anysourcebig") {
      std::vector<int32_t> buf(2000, 0);
      if (rank == 0) {
        try {
          comm->recv(buf.data(), buf.size(), DataType::int32, kAnySource, 1);
        } catch (const Unsupported& e) {
          std::printf("rank 0 unsupported: %s\n", e.what());
        }
      }
      comm->barrier();
      if (rank == 1) comm->send(buf.data(), buf.size(), DataType::int32, 0, 1);
      if (rank == 0) comm->recv(buf.data(), buf.size(), DataType::int32, 1, 1);
      rc = 0;
    }
    if (mode == "latency") rc = latency(*comm, argc > 2 ? std::atoi(argv[2]) : 1000);
    if (mode == "exit") {
      comm->barrier();
      if (rank == (argc > 3 ? std::atoi(argv[3]) : 1)) return argc > 2 ? std::atoi(argv[2]) : 3;
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 0;
    }
    if (mode == "calls") {  // which MPI call an 8-byte allreduce and broadcast made (the flight record)
      float buf[2] = {1, 2};
      comm->allreduce(buf, buf, 2, DataType::float32, ReduceOp::sum);
      const std::string allreduce = testing::last_algorithm(*comm);
      comm->broadcast(buf, 2, DataType::float32, 0);
      std::printf("rank %d calls allreduce=%s broadcast=%s\n", rank, allreduce.c_str(), testing::last_algorithm(*comm).c_str());
      return 0;
    }
    if (mode == "mismatch") {
      float buf[4] = {1, 2, 3, 4};
      if (rank == 0)
        comm->allreduce(buf, buf, 4, DataType::float32, ReduceOp::sum);
      else
        comm->broadcast(buf, 4, DataType::float32, 0);
      std::printf("rank %d: no mismatch reported\n", rank);
      return 1;
    }
    if (rc == 0) std::printf("rank %d ok\n", rank);
    return rc;
  } catch (const Mismatch& e) {
    std::printf("rank %d mismatch: %s\n", rank, e.what());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return 3;
  } catch (const std::exception& e) {
    std::printf("rank %d error: %s\n", rank, e.what());
    return 1;
  }
}
