// Splitting a communicator (front_door.h): every rank learns every (color, key) through the parent's own
// allgather, the front door works out each group (members, new ranks, hosts, a private store), and the
// backend makes the group's backend.
#include <algorithm>

#include "core/front_door.h"
#include "core/topology.h"

namespace mpcomm::detail {

std::unique_ptr<Communicator> FrontDoor::split(int color, int key) {
  Backend& b = *backend_;
  Op split_op{.kind = OpKind::split, .seq = seq_};
  throw_if_aborted(split_op);
  // Every rank learns every (color, key) through this communicator's own allgather; the new group's
  // store is a private prefix named after that allgather's sequence number, so it is unique.
  SplitPlan plan;
  plan.color = color;
  plan.key = key;
  plan.seq = seq_;
  plan.recreate = recreate_;
  const int n = b.size();
  int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  Op gather{.kind = OpKind::allgather, .send = mine, .recv = all.data(), .count = 2, .dtype = DataType::int64};
  collective(gather);
  if (color >= 0) {
    for (int r = 0; r < n; ++r)
      if (all[2 * static_cast<size_t>(r)] == color) plan.members.push_back(r);
    std::stable_sort(plan.members.begin(), plan.members.end(), [&](int x, int y) {
      return all[2 * static_cast<size_t>(x) + 1] < all[2 * static_cast<size_t>(y) + 1];
    });
    plan.new_rank =
        static_cast<int>(std::find(plan.members.begin(), plan.members.end(), b.rank()) - plan.members.begin());
    std::vector<std::string> hosts;
    for (int m : plan.members)
      hosts.push_back(b.topology().host_names[static_cast<size_t>(b.topology().host_of_rank[static_cast<size_t>(m)])]);
    plan.topology = topology_from_hosts(hosts, plan.new_rank);
    if (b.store())
      plan.store = std::make_shared<PrefixStore>("split" + std::to_string(plan.seq) + "/color" + std::to_string(color),
                                                 b.store());
  }
  // The backend's own split is collective over this communicator, in issue order like any collective.
  std::unique_ptr<Backend> child;
  try {
    Driving driving(*this, split_op);
    child = b.split(plan);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument && e.code() != ErrorCode::unsupported) abort(e.code(), e.what());
    throw;
  }
  if (!child) return nullptr;
  auto comm = make_communicator(std::move(child), recreate_);
  {
    std::lock_guard<std::mutex> g(children_mu_);  // revoked with this one (shrink.cc)
    std::erase_if(children_, [](const std::weak_ptr<FrontDoor>& w) { return w.expired(); });
    children_.push_back(of(*comm).shared_from_this());
  }
  of(*comm).parent_ = weak_from_this();
  if (Timeline* t = timeline()) {  // traced: so is the group, on a track of its own
    const std::vector<int> mine = t->world_ranks(track_);
    std::vector<int> world;
    for (int m : plan.members) world.push_back(static_cast<size_t>(m) < mine.size() ? mine[static_cast<size_t>(m)] : m);
    of(*comm).attach_timeline(timeline_, t->add_track("group", std::move(world)));
  }
  return comm;
}

}  // namespace mpcomm::detail
