#include "backends/native/backend.h"

#include <unistd.h>

#include <chrono>
#include <random>
#include <sstream>

#include "backends/native/algorithms/algorithms.h"
#include "backends/native/engine/engine.h"
#include "backends/native/selection/selection.h"
#include "backends/native/selection/world_facts.h"
#include "backends/native/transport/shm/shm_segment.h"
#include "backends/native/transport/tcp/tcp_link.h"
#include "bootstrap/peer_directory.h"
#include "core/op.h"
#include "core/reproducible/exact.h"
#include "device/device.h"
#include "log/log.h"
#include "net/socket.h"
#include "settings/settings.h"

namespace mpcomm::native {

namespace {

std::string random_hex(int n) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32));
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += digits[rng() % 16];
  return s;
}

class NativeBackend final : public detail::Backend {
 public:
  NativeBackend(int rank, int size, Topology topo, Options opts, std::shared_ptr<Store> store,
                std::shared_ptr<Engine> engine, Selection selection, tuning::Shape shape)
      : Backend("native", rank, size, std::move(topo), std::move(opts), std::move(store)),
        engine_(std::move(engine)),
        selection_(std::move(selection)),
        shape_(shape) {}

  ~NativeBackend() override { engine_->close(); }

  void run(const detail::Op& op) override {
    engine_->begin(&op);
    engine_->entered(op.seq);
    AlgoCtx ctx{*engine_, op, rank(), size(), scratch_, topology(), selection_};
    struct Notify {  // the frames the op left in links wake their receivers, however the op ends
      Engine& e;
      ~Notify() { e.notify_deferred(); }
    } notify{*engine_};
    const Algorithm& a = selection_.choose(ctx);
    op.algorithm = op.reproducible ? "reproducible+direct" : a.name;
    // What every algorithm is spared (algorithms.h): one rank, no elements, avg's division.
    if (!op.uneven() && (size() == 1 || (op.bytes() == 0 && op.kind != OpKind::barrier))) return run_alone(ctx);
    a.fn(ctx);
    if (!a.divides_avg) divide_avg_result(ctx);
  }

  std::shared_ptr<detail::RequestState> start(const detail::Op& op) override;

  void abort(ErrorCode code, const std::string& reason) override { engine_->publish_abort(code, reason); }
  void close() override { engine_->close(); }
  // Every frame carries its size, and a receive of another size is a Mismatch (engine.h).
  bool checks_sizes() const override { return true; }
  // On one host with single copy, the direct algorithms sum reproducibly in one pass (Selection::reproducible)
  // unless MPCOMM_ALGO forces another algorithm for the op; device buffers are left to the front door.
  bool runs_reproducible(const detail::Op& op) const override {
    const HostLocal* h = engine_->host();
    return size() > 1 && static_cast<uint64_t>(size()) <= detail::repro::kMaxValues && h != nullptr &&
           h->single_copy() && (op.kind == OpKind::allreduce || op.kind == OpKind::reduce_scatter) &&
           selection_.allows(op.kind, "direct") && options().device.kind != Device::cuda;
  }
  const tuning::Shape& shape() const { return shape_; }

 private:
  std::shared_ptr<Engine> engine_;
  Selection selection_;
  tuning::Shape shape_;
  std::vector<char> scratch_;
};

// A send or receive in flight. Its errors name it as the backend would (the engine names the op the
// same way), without the backend, which need not outlive it.
class P2PRequest : public detail::RequestState {
 public:
  P2PRequest(std::shared_ptr<Engine> e, Handle h, detail::Op op) : e_(std::move(e)), h_(std::move(h)), op_(op) {}
  void wait() override {
    e_->begin(&op_);
    e_->wait(h_);
  }
  bool test() override {
    e_->begin(&op_);
    return e_->test(h_);
  }
  int source() const override { return h_->done && !h_->is_send ? h_->peer : -1; }

 private:
  std::shared_ptr<Engine> e_;
  Handle h_;
  detail::Op op_;
};

std::shared_ptr<detail::RequestState> NativeBackend::start(const detail::Op& op) {
  engine_->begin(&op);
  Handle h = op.kind == OpKind::send ? engine_->send_p2p(op.peer, op.tag, op.send, op.bytes())
                                     : engine_->recv_p2p(op.peer, op.tag, op.recv, op.bytes());
  // What the flight record shows: a send's path (the table's send.path rows), a receive's frames.
  op.algorithm = op.kind == OpKind::recv                          ? "frames"
                 : h->single_copy                                 ? "single_copy"
                 : topology().host_of_rank[static_cast<size_t>(op.peer)] != topology().host ? "tcp"
                                                                  : "ring";
  return std::make_shared<P2PRequest>(engine_, std::move(h), op);
}

}  // namespace

std::unique_ptr<detail::Backend> create_native(std::shared_ptr<Store> store, int rank, int size, const Options& in) {
  Options opts = in.resolved();
  // cuda buffers are staged through host memory by the front door (core/device_staging.h).
  if (opts.device.kind == Device::cuda) device::require_cuda("native on " + to_string(opts.device));
  const auto deadline = net::deadline_after(opts.timeout);
  const int pid = static_cast<int>(getpid());
  Selection selection(opts);  // MPCOMM_ALGO and MPCOMM_TUNING: bad input fails here, before any traffic

  // 1. Who is where: host id and pid of every rank.
  const std::string who = "native communicator setup on rank " + std::to_string(rank) + " of " + std::to_string(size);
  PeerDirectory dir = exchange_peers(*store, rank, size, opts.host_id, opts.bind_addr, deadline, who);
  Topology topo = dir.topology;
  const std::vector<int>& pid_of = dir.pids;
  std::vector<int> locals, remote;
  for (int r = 0; r < size; ++r) {
    if (topo.host_of_rank[r] == topo.host)
      locals.push_back(r);
    else
      remote.push_back(r);
  }

  // 2. Shared memory among the ranks of this host: the lowest rank creates, the others open, and the
  //    name is unlinked once all have mapped it.
  std::shared_ptr<ShmSegment> seg;
  if (locals.size() > 1) {
    const int nlocal = static_cast<int>(locals.size());
    const std::string key = "shm/" + std::to_string(topo.host);
    if (rank == locals[0]) {
      std::string job = param_string(opts, "MPCOMM_JOB_ID");
      std::string name = "/mpcomm." + (job.empty() ? std::string("nojob") : job) + "." + std::to_string(pid) + "." + random_hex(8);
      seg = ShmSegment::create(name, nlocal, ShmSegment::default_ring_bytes(nlocal, param_int(opts, "MPCOMM_SHM_RING_BYTES")));
      store->set_string(key, name);
      try {
        for (size_t i = 1; i < locals.size(); ++i)
          get_before(*store, "shm_ok/" + std::to_string(locals[i]), deadline, who, "local rank " + std::to_string(locals[i]));
      } catch (...) {
        ShmSegment::unlink(name);
        throw;
      }
      ShmSegment::unlink(name);
    } else {
      std::string name = get_before(*store, key, deadline, who, "local rank " + std::to_string(locals[0]));
      seg = ShmSegment::open(name, nlocal);
      store->set_string("shm_ok/" + std::to_string(rank), "1");
    }
  }

  // 3. TCP to every rank of another host.
  auto tcp = connect_tcp_mesh(*store, rank, remote, opts.bind_addr, opts.token,
                              static_cast<int>(param_int(opts, "MPCOMM_TCP_STREAMS")),
                              param_string(opts, "MPCOMM_TLS") == "1", deadline);

  std::vector<std::unique_ptr<Link>> links(size);
  std::vector<PeerInfo> peers(size);
  for (int r = 0; r < size; ++r) {
    peers[r].pid = pid_of[r];
    peers[r].same_host = topo.host_of_rank[r] == topo.host;
    if (!peers[r].same_host) peers[r].where = " on " + dir.machines[r] + " at " + dir.addresses[r];
    if (r == rank) continue;
    if (peers[r].same_host) {
      int li = static_cast<int>(std::find(locals.begin(), locals.end(), r) - locals.begin());
      peers[r].local = li;
      links[r] = std::make_unique<ShmLink>(seg.get(), topo.local_rank, li);
    } else {
      tcp.at(r)->set_name("rank " + std::to_string(r) + peers[r].where);
      links[r] = std::move(tcp.at(r));
    }
  }
  const int my_local = seg ? topo.local_rank : -1;
  EngineSettings settings = engine_settings(opts);
  settings.machine_ranks = static_cast<int>(std::count(dir.machines.begin(), dir.machines.end(), dir.machines[rank]));
  auto engine = std::make_shared<Engine>(rank, size, std::move(links), std::move(peers), std::move(seg), my_local,
                                         opts.elastic > 0 ? store : root_store(store), opts.timeout, settings);

  // 4. The facts the algorithm choice depends on, the same on every rank; the tables and MPCOMM_ALGO.
  const WorldFacts facts = agree_world_facts(*store, *engine, topo, settings.cpus, selection.far_ns(), deadline, who);
  selection.fit(facts.shape);
  engine->set_paths(selection.paths());
  MPCOMM_LOG(info, "native rank %d/%d up: host %d of %d, %d local ranks, %zu tcp peers; algorithms from %s", rank, size,
             topo.host, topo.num_hosts(), topo.local_size, remote.size(), selection.describe().c_str());
  return std::make_unique<NativeBackend>(rank, size, std::move(topo), std::move(opts), std::move(store),
                                         std::move(engine), std::move(selection), facts.shape);
}

const tuning::Shape* agreed_shape(const detail::Backend& b) {
  const auto* n = dynamic_cast<const NativeBackend*>(&b);
  return n != nullptr ? &n->shape() : nullptr;
}

}  // namespace mpcomm::native
