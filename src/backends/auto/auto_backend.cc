// The auto backend (auto_backend.h): creation (what every rank agrees on, the children), routing each
// op, split, abort.
#include "backends/auto/auto_backend.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "backends/auto/route_table.h"
#include "backends/auto/router.h"
#include "backends/native/backend.h"
#include "backends/registry.h"
#include "bootstrap/peer_directory.h"
#include "device/device.h"
#include "log/log.h"
#include "net/socket.h"
#include "settings/settings.h"

namespace mpcomm::autosel {

namespace {

// Every child name auto knows, in child order: native first (it answers where no row and no profile does, and its
// facts are the table's key).
const char* const kKnown[] = {"native", "gloo", "mpi", "nccl"};

// "BACKEND/ALGORITHM" as a string that lives as long as the program (the flight recorder keeps the
// pointer).
const char* label(const std::string& backend, const char* algorithm) {
  static std::mutex mu;
  static std::set<std::string> labels;
  std::lock_guard<std::mutex> lk(mu);
  return labels.insert(backend + "/" + (algorithm != nullptr ? algorithm : "-")).first->c_str();
}

struct Child {
  std::string name;
  detail::BackendFactory factory = nullptr;
  std::unique_ptr<detail::Backend> backend;
  // The last label made for this child: the algorithm it names and the label.
  const char* last_algorithm = nullptr;
  const char* last_label = nullptr;
};

class AutoBackend final : public detail::Backend {
 public:
  AutoBackend(int rank, int size, Options opts, std::shared_ptr<Store> store, std::vector<Child> children,
              std::shared_ptr<const tuning::Table> table, std::shared_ptr<const tuning::Profile> profile)
      : Backend("auto", rank, size, children.at(0).backend->topology(), std::move(opts), std::move(store)),
        children_(std::move(children)),
        router_(std::move(table), *native::agreed_shape(*children_[0].backend), names(children_), forced_child(), rank,
                std::move(profile)) {}

  ~AutoBackend() override = default;

  void run(const detail::Op& op) override {
    Child& c = children_[static_cast<size_t>(router_.route(op))];
    op.algorithm = nullptr;
    c.backend->run(op);
    op.algorithm = labelled(c, op.algorithm);
  }

  std::shared_ptr<detail::RequestState> start(const detail::Op& op) override {
    Child& c = children_[static_cast<size_t>(router_.route(op))];
    op.algorithm = nullptr;
    auto state = c.backend->start(op);
    op.algorithm = labelled(c, op.algorithm);
    return state;
  }

  void abort(ErrorCode code, const std::string& reason) override {
    for (Child& c : children_) c.backend->abort(code, reason);
  }

  void close() override {
    for (Child& c : children_) c.backend->close();
  }

  std::unique_ptr<Backend> split(const detail::SplitPlan& plan) override {
    // Every child splits (collective over each; mpi and nccl with their own split), each on its own
    // prefix of the group's store.
    std::vector<Child> kids;
    for (Child& c : children_) {
      detail::SplitPlan p = plan;
      p.recreate = c.factory;
      if (plan.store) p.store = std::make_shared<PrefixStore>(c.name, plan.store);
      std::unique_ptr<Backend> b = c.backend->split(p);
      if (b) kids.push_back({c.name, c.factory, std::move(b)});
    }
    if (plan.color < 0) return nullptr;
    return std::make_unique<AutoBackend>(plan.new_rank, static_cast<int>(plan.members.size()), options(), plan.store,
                                         std::move(kids), router_.table(), router_.profile());
  }

  // Its children would each have to shrink, the mpi one cannot; not written yet.
  bool shrinks() const override { return false; }
  bool checks_sizes() const override {
    return std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.backend->checks_sizes(); });
  }
  bool receives_from_any_source() const override {
    return std::all_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.backend->receives_from_any_source(); });
  }
  bool cheap_test() const override {
    return std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.backend->cheap_test(); });
  }
  // With device buffers and nccl present every call is nccl's; else the CPU backends' (staged).
  detail::MemoryType runs_on() const override {
    return forced_child() >= 0 ? children_[static_cast<size_t>(forced_child())].backend->runs_on()
                               : detail::MemoryType::host;
  }

 private:
  static std::vector<std::string> names(const std::vector<Child>& cs) {
    std::vector<std::string> out;
    for (const Child& c : cs) out.push_back(c.name);
    return out;
  }
  int forced_child() const {
    if (options().device.kind != Device::cuda) return -1;
    for (size_t i = 0; i < children_.size(); ++i)
      if (children_[i].name == "nccl") return static_cast<int>(i);
    return -1;
  }
  // The label of what child c ran: a lookup when it ran what it ran last time.
  static const char* labelled(Child& c, const char* algorithm) {
    if (algorithm != c.last_algorithm || c.last_label == nullptr) {
      c.last_algorithm = algorithm;
      c.last_label = label(c.name, algorithm);
    }
    return c.last_label;
  }

  std::vector<Child> children_;
  Router router_;
};

}  // namespace

std::vector<std::string> wanted_backends(const Options& opts) {
  std::vector<std::string> wanted;
  std::stringstream in(param_string(opts, "MPCOMM_AUTO_BACKENDS"));
  for (std::string w; std::getline(in, w, ',');) {
    if (w.empty()) continue;
    if (std::find(std::begin(kKnown), std::end(kKnown), w) == std::end(kKnown))
      throw InvalidArgument("mpcomm: MPCOMM_AUTO_BACKENDS: '" + w +
                            "' is not a backend auto can route to (native, gloo, mpi, nccl)");
    wanted.push_back(w);
  }
  return wanted;
}

Usable usable_here(const Options& opts, int rank, int size) {
  Usable u;
  const std::vector<std::string> wanted = wanted_backends(opts);
  for (const char* name : kKnown) {
    const std::string n(name);
    std::string why;
    const detail::BackendFactory f = detail::backend_factory(n);
    if (f == nullptr) {
      why = "not in this build";
    } else if (!wanted.empty() && n != "native" && std::find(wanted.begin(), wanted.end(), n) == wanted.end()) {
      why = "left out by MPCOMM_AUTO_BACKENDS";
    } else if (n == "mpi") {
      const char* ws = std::getenv("OMPI_COMM_WORLD_SIZE");
      const char* wr = std::getenv("OMPI_COMM_WORLD_RANK");
      if (ws == nullptr || wr == nullptr || std::atoi(ws) != size || std::atoi(wr) != rank)
        why = "the ranks are not MPI_COMM_WORLD: start them with mpirun (mpcomm launch does)";
    } else if (n == "nccl") {
      if (opts.device.kind != Device::cuda)
        why = "the buffers are in host memory (MPCOMM_DEVICE=cuda puts them on the GPU)";
      else if (device::cuda_devices() == 0)
        why = "no GPU is usable here";
    }
    if (why.empty())
      u.names.push_back(n);
    else
      u.left_out.push_back(n + " (" + why + ")");
  }
  return u;
}

std::unique_ptr<detail::Backend> create_auto(std::shared_ptr<Store> store, int rank, int size, const Options& in) {
  const Options opts = in.resolved();
  const auto deadline = net::deadline_after(opts.timeout);
  const std::string who = "auto communicator setup on rank " + std::to_string(rank) + " of " + std::to_string(size);
  auto own = std::make_shared<PrefixStore>("auto", store);

  // 1. Which backends every rank can use: each rank's mask, and their intersection.
  const Usable mine = usable_here(opts, rank, size);
  unsigned mask = 0;
  for (size_t k = 0; k < std::size(kKnown); ++k)
    if (std::find(mine.names.begin(), mine.names.end(), kKnown[k]) != mine.names.end()) mask |= 1U << k;
  own->set_string("usable/" + std::to_string(rank), std::to_string(mask));

  unsigned all = mask;
  for (int r = 0; r < size; ++r)
    if (r != rank)
      all &= static_cast<unsigned>(
          std::stoul(get_before(*own, "usable/" + std::to_string(r), deadline, who, "rank " + std::to_string(r))));

  // 2. The children, one after the other on every rank (each creation is collective).
  std::vector<Child> children;
  for (size_t k = 0; k < std::size(kKnown); ++k) {
    if ((all >> k & 1U) == 0) continue;
    const std::string name = kKnown[k];
    Child c{name, detail::backend_factory(name), nullptr};
    try {
      c.backend = c.factory(std::make_shared<PrefixStore>(name, store), rank, size, opts);
    } catch (const Error& e) {
      throw_error(e.code(), who + ": its " + name + " backend: " + e.what());
    }
    children.push_back(std::move(c));
  }

  // 3. Rank 0's table (for this machine and the job's hosts), its text for every rank; an error in it is
  //    every rank's.
  if (rank == 0) {
    try {
      const TableChoice t =
          choose_table(param_string(opts, "MPCOMM_TUNING"), children[0].backend->topology().num_hosts());
      for (const std::string& w : t.warnings) MPCOMM_LOG(warn, "auto: %s", w.c_str());
      own->set_string("table/text", t.text);
      own->set_string("table/source", t.source);
    } catch (const Error& e) {
      own->set_string("table/source", std::string("!") + e.what());
      throw;
    }
  }
  const std::string source = get_before(*own, "table/source", deadline, who, "rank 0");
  if (source.rfind('!', 0) == 0) throw InvalidArgument(source.substr(1) + " (rank 0's table, which every rank uses)");
  auto table = std::make_shared<tuning::Table>(
      tuning::parse_table(get_before(*own, "table/text", deadline, who, "rank 0"), source, "auto", vocabulary()));

  // 4. Rank 0's cost-model profile of this machine (`mpcomm plan --calibrate`), if it has one that reads: where
  //    no row matches a call, the child it predicts fastest runs it, on every rank alike.
  if (rank == 0) {
    std::string text;
    if (std::ifstream in(tuning::this_machine_profile_path()); in) {
      std::stringstream ss;
      ss << in.rdbuf();
      try {
        tuning::parse_profile(ss.str(), tuning::this_machine_profile_path());
        text = ss.str();
      } catch (const Error& e) {
        MPCOMM_LOG(warn, "auto: this machine's profile is not used: %s", e.what());
      }
    }
    own->set_string("profile/text", text);
  }
  std::shared_ptr<const tuning::Profile> profile;
  if (std::string text = get_before(*own, "profile/text", deadline, who, "rank 0"); !text.empty())
    profile = std::make_shared<const tuning::Profile>(tuning::parse_profile(text, "rank 0's this-machine"));

  std::string names, left;
  for (const Child& c : children) names += (names.empty() ? "" : ", ") + c.name;
  for (const std::string& l : mine.left_out) left += (left.empty() ? "; left out here: " : ", ") + l;
  MPCOMM_LOG(info, "auto rank %d/%d up: routes to %s; table: %s%s", rank, size, names.c_str(), source.c_str(),
             left.c_str());
  return std::make_unique<AutoBackend>(rank, size, opts, std::move(store), std::move(children), std::move(table),
                                       std::move(profile));
}

}  // namespace mpcomm::autosel
