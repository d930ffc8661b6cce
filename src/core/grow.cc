// Communicator::grow and mpcomm::join (communicator.h): processes that join a running job take the next ranks
// of a new communicator over the job's ranks and them. They meet under keys of the job's root store:
//   mpcomm/join/arrivals  a counter: a joiner's add gives its place in the queue (0, 1, ...);
//   mpcomm/join/taken     a counter: a grow(n) takes the next n places;
//   mpcomm/join/seat/<j>  what the joiner in place j gets: the group, its rank, the size, the backend;
//   mpcomm/join/closed    set by close_joins(): joiners without a seat stop waiting;
//   mpcomm/join/limit     set by mpcomm launch --max-restarts: how many joiners the job's launchers start in all.
// grow(n) is collective over a healthy communicator: its rank 0 takes n places and tells its ranks the first
// (a broadcast; the group is named after it, "mpcomm/join/grow<first>/group"); every rank waits (up to the
// timeout) for that many joiners; rank 0 seats them; then every member — this communicator's ranks in their order, then
// the joiners in the order they came — makes the new communicator with the factory that made this one. Joiners prove
// the job's secret to the store and to the transports like any rank (Options::token).
#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/front_door.h"
#include "mpcomm/error.h"

namespace mpcomm {

namespace {

constexpr const char* kArrivals = "mpcomm/join/arrivals";
constexpr const char* kTaken = "mpcomm/join/taken";
constexpr const char* kClosed = "mpcomm/join/closed";
constexpr const char* kLimit = "mpcomm/join/limit";
std::string seat_key(int64_t place) { return "mpcomm/join/seat/" + std::to_string(place); }
std::string group_prefix(int64_t g) { return "mpcomm/join/grow" + std::to_string(g) + "/group"; }

}  // namespace

std::unique_ptr<Communicator> join(std::shared_ptr<Store> job_store, const Options& in) {
  if (job_store == nullptr) throw InvalidArgument("mpcomm: join: no store given");
  const Options opts = in.resolved();
  const std::shared_ptr<Store> root = root_store(job_store);
  const int64_t place = root->add(kArrivals, 1) - 1;
  // The seat, or the doors closed; a seat written before the close still counts.
  const auto deadline = std::chrono::steady_clock::now() + opts.timeout;
  while (!root->check({seat_key(place)})) {
    if (root->check({kClosed})) return nullptr;
    if (std::chrono::steady_clock::now() >= deadline)
      throw Timeout("mpcomm: join: place " + std::to_string(place) +
                    " in the job's queue: no grow() seated it within " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(opts.timeout).count()) +
                    " ms (the job's ranks must call grow(); MPCOMM_TIMEOUT sets how long a joiner waits)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string seat = root->get_string(seat_key(place), opts.timeout);
  std::istringstream in_seat(seat);
  int64_t g = -1;
  int rank = -1, size = 0;
  std::string backend;
  if (!(in_seat >> g >> rank >> size >> backend) || rank < 0 || rank >= size)
    throw Internal("mpcomm: join: place " + std::to_string(place) + ": a malformed seat '" + seat + "'");
  return create(backend, std::make_shared<PrefixStore>(group_prefix(g), root), rank, size, opts);
}

namespace {

std::shared_ptr<Store> job_root(Communicator& member, const char* what) {
  const auto& b = detail::FrontDoor::of(member).backend();
  if (b.store() == nullptr)
    throw Unsupported(std::string("mpcomm: ") + what + ": the " + std::string(b.name()) + " communicator has no store");
  return root_store(b.store());
}

}  // namespace

std::unique_ptr<Communicator> join(Communicator& member) {
  return join(job_root(member, "join"), detail::FrontDoor::of(member).backend().options());
}

void close_joins(Communicator& member) { job_root(member, "close_joins")->set_string(kClosed, "1"); }

int64_t waiting_joiners(Communicator& member) {
  const auto root = job_root(member, "waiting_joiners");
  return root->add(kArrivals, 0) - root->add(kTaken, 0);
}

namespace detail {

std::unique_ptr<Communicator> FrontDoor::grow(int n) {
  Backend& b = *backend_;
  const std::string who = "mpcomm: grow on rank " + std::to_string(b.rank()) + " of " + std::to_string(b.size()) +
                          " [" + std::string(b.name()) + "]";
  if (n < 1) throw InvalidArgument(who + ": grow by " + std::to_string(n) + " ranks; it takes at least 1");
  if (!b.shrinks() || b.store() == nullptr || recreate_ == nullptr)
    throw Unsupported(who + ": the " + std::string(b.name()) + " backend cannot grow a communicator");
  Op op{.kind = OpKind::broadcast, .seq = seq_};
  throw_if_aborted(op);
  const std::shared_ptr<Store> root = root_store(b.store());
  // Rank 0 takes the places; every rank learns the first over this communicator (it names the group too).
  // Under a launcher that says how many joiners it starts, a grow that no joiner could ever fill is refused at
  // once on every rank (rather than waiting out the timeout). Joiners already waiting count even beyond it.
  int64_t first = -1, limit = -1, taken = 0, arrived = 0;
  if (b.rank() == 0) {
    try {
      if (root->check({kLimit})) {
        limit = std::stoll(root->get_string(kLimit, b.options().timeout));
        taken = root->add(kTaken, 0);
        arrived = root->add(kArrivals, 0);
      }
      first = (limit >= 0 && taken + n > std::max(limit, arrived)) ? -2 : root->add(kTaken, n) - n;
    } catch (const std::exception&) {
      first = -1;  // every rank says so below
    }
  }
  int64_t told[4] = {first, limit, taken, arrived};
  Op tell{.kind = OpKind::broadcast, .send = told, .recv = told, .count = 4, .dtype = DataType::int64, .root = 0};
  collective(tell);
  first = told[0];
  if (first == -2)
    throw InvalidArgument(who + ": grow by " + std::to_string(n) + " ranks: the job's launchers start at most " +
                          std::to_string(told[1]) + " joiners in all (mpcomm launch --max-restarts, per node); " +
                          std::to_string(told[2]) + " were seated already and " + std::to_string(told[3] - told[2]) +
                          " wait");
  if (first < 0) throw PeerFailure(who + ": rank 0 could not take places in the job's store");
  // Every rank waits for the joiners itself, so that none waits in a collective longer than the timeout.
  const auto deadline = std::chrono::steady_clock::now() + b.options().timeout;
  while (root->add(kArrivals, 0) < first + n) {
    if (std::chrono::steady_clock::now() >= deadline)
      throw Timeout(who + ": fewer than " + std::to_string(n) + " processes called mpcomm::join() within the timeout");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int64_t g = first;
  if (b.rank() == 0)
    for (int i = 0; i < n; ++i)
      root->set_string(seat_key(first + i), std::to_string(g) + " " + std::to_string(b.size() + i) + " " +
                                                std::to_string(b.size() + n) + " " + std::string(b.name()));
  auto store = std::make_shared<PrefixStore>(group_prefix(g), root);
  return make_communicator(recreate_(store, b.rank(), b.size() + n, b.options()), recreate_);
}

}  // namespace detail
}  // namespace mpcomm
