#include "harness/thread_world.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace mpcomm::testing {

namespace {

// Every op on both of auto's children, by size (ranges that every op's conformance counts reach on both
// sides), so that the suite checks routing, not only native.
constexpr const char* kMixedAutoTable = R"(mpcomm-tuning 1 backend=auto
allreduce bytes=[0,16] -> gloo
allreduce bytes=[256,4K] -> gloo
broadcast bytes=(16,inf) -> gloo
reduce bytes=[0,64] -> gloo
allgather bytes=(16,inf) -> gloo
reduce_scatter bytes=[0,16] -> gloo
gather bytes=(16,inf) -> gloo
scatter bytes=[0,16] -> gloo
alltoall bytes=(16,inf) -> gloo
alltoallv dtype=float -> gloo
allgatherv bytes=[0,16] -> gloo
barrier -> gloo
sendrecv bytes=(16,inf) -> gloo
)";

}  // namespace

std::vector<std::exception_ptr> run_threads(int size, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

std::string message(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "non-standard exception";
  }
}

std::string mixed_auto_table() {
  // Written once per test process, removed when it exits.
  struct File {
    std::string path;
    File() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/mpcomm-test-auto-mixed-" +
             std::to_string(::getpid()) + ".table";
      std::ofstream(path) << kMixedAutoTable;
    }
    ~File() { ::unlink(path.c_str()); }
  };
  static const File file;
  return file.path;
}

ThreadWorld::ThreadWorld(std::string backend, int size, Options opts, std::vector<std::string> hosts)
    : store_(std::make_shared<HashStore>()), comms_(static_cast<size_t>(size)) {
  if (backend == "auto" && opts.params.count("MPCOMM_TUNING") == 0) opts.params["MPCOMM_TUNING"] = mixed_auto_table();
  auto errors = run_threads(size, [&](int r) {
    Options o = opts;
    if (!hosts.empty()) o.host_id = hosts[static_cast<size_t>(r)];
    comms_[static_cast<size_t>(r)] = create(backend, store_, r, size, o);
  });
  for (int r = 0; r < size; ++r)
    if (errors[static_cast<size_t>(r)])
      throw std::runtime_error("creating rank " + std::to_string(r) + ": " + message(errors[static_cast<size_t>(r)]));
}

ThreadWorld::~ThreadWorld() = default;

std::vector<std::exception_ptr> ThreadWorld::run_collect(const std::function<void(int, Communicator&)>& fn) {
  return run_threads(size(), [&](int r) { fn(r, comm(r)); });
}

void ThreadWorld::run(const std::function<void(int, Communicator&)>& fn) {
  auto errors = run_collect(fn);
  for (int r = 0; r < size(); ++r)
    if (errors[static_cast<size_t>(r)])
      throw std::runtime_error("rank " + std::to_string(r) + ": " + message(errors[static_cast<size_t>(r)]));
}

ThreadWorld& shared_world(const std::string& backend, int size) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::unique_ptr<ThreadWorld>> worlds;
  std::lock_guard<std::mutex> lock(mu);
  auto& w = worlds[{backend, size}];
  if (!w) {
    Options o;
    o.timeout = Millis(120000);
    w = std::make_unique<ThreadWorld>(backend, size, o);
  }
  return *w;
}

std::vector<std::string> thread_backends() {
  std::vector<std::string> out;
  for (const auto& b : available_backends())
    if (b != "mpi" && b != "nccl") out.push_back(b);
  return out;
}

}  // namespace mpcomm::testing
