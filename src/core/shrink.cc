// Communicator::shrink (front_door.h): the survivors of a failure — or every rank but the excluded ones —
// agree through the store on who stays, this communicator is revoked, and the factory that made it makes a
// new one over them (as split() does for a group).
//
// The agreement, under the keys "shrink<k>/" of this communicator's store (k counts this communicator's
// shrinks, the same on every rank that calls it):
//   1. every caller revokes its communicator (its pending ops fail with Revoked; after a failure its backend
//      was aborted already, so ops blocked in it have ended) and sets here/<rank>;
//   2. it waits until every rank is here, excluded, or gone — known gone by any caller (a rank of its host
//      whose process has ended or is stopped: process_gone; a rank of another host whose process's heartbeat
//      has not moved for kBeatStalled: cut off or stopped, heartbeat.h; published as gone/<rank>) — or until
//      the timeout;
//   3. the first caller to get there takes ticket 1 of an atomic add and writes `members`: the ranks here
//      then. Every caller reads `members`: one writer, so one list. A rank that checks in after it was
//      written, or is not in it, is counted out (PeerFailure).
//   4. every member makes the new communicator and says whether it could (made/<rank> or unmade/<rank>); it is
//      kept only when every member made it.
// A further failure while this runs: a rank that dies before checking in is left out (at the latest when
// the timeout passes); one that dies after is in the list, and creating the new communicator fails with a
// peer failure or timeout on the others (or on some of them) — who then agree again, under "shrink<k+1>/",
// without it (at most size() rounds). The writer dying between its ticket and its write leaves the others waiting for
// `members` until the timeout.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "bootstrap/process_state.h"
#include "core/front_door.h"
#include "core/heartbeat.h"
#include "core/topology.h"
#include "log/log.h"

namespace mpcomm::detail {

namespace {

std::string list_of(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// Whether rank q's process is known lost: it runs on this host (its "proc" key, published when the
// communicator was made) and no such process exists, or it is a zombie its parent has not reaped yet, or it
// is stopped (SIGSTOP, a debugger): it cannot check in, and would be counted out if it came back later.
bool process_gone(Store& store, int q, const std::string& host) {
  const std::string key = shrink_process_key(q);
  if (!store.check({key})) return false;
  const std::string v = store.get_string(key, Millis(1000));
  const size_t nl = v.rfind('\n');
  if (nl == std::string::npos || v.substr(0, nl) != host) return false;
  const int pid = std::atoi(v.c_str() + nl + 1);
  if (pid <= 0 || pid == static_cast<int>(::getpid())) return false;
  return process_state(pid) != ProcessState::running;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

// Whether rank q's process — on another host — has stopped beating (heartbeat.h): `last` and `since` hold what
// this caller saw of its counter and since when. A process that never beat is not judged.
bool beat_stalled(Store& store, Store& root, int q, const std::string& host, int64_t& last,
                  std::chrono::steady_clock::time_point& since) {
  const std::string key = shrink_process_key(q);
  if (!store.check({key})) return false;
  const std::string v = store.get_string(key, Millis(1000));
  const size_t nl = v.rfind('\n');
  if (nl == std::string::npos || v.substr(0, nl) == host) return false;
  const int64_t beats = root.add(heartbeat_key(v.substr(0, nl), v.substr(nl + 1)), 0);
  const auto now = std::chrono::steady_clock::now();
  if (beats != last) {
    last = beats;
    since = now;
    return false;
  }
  return beats > 0 && now - since >= kBeatStalled;
}

// Which ranks are known lost, for the waits of a shrink: a process of this host that ended or stopped, or one of
// another host whose heartbeat stalled (it keeps what it saw of each counter).
class LostRanks {
 public:
  LostRanks(Store& store, std::shared_ptr<Store> root, std::string host, int n)
      : store_(store),
        root_(std::move(root)),
        host_(std::move(host)),
        beats_(static_cast<size_t>(n), -1),
        since_(static_cast<size_t>(n)) {}
  bool lost(int q) {
    const auto i = static_cast<size_t>(q);
    return process_gone(store_, q, host_) || beat_stalled(store_, *root_, q, host_, beats_[i], since_[i]);
  }

 private:
  Store& store_;
  std::shared_ptr<Store> root_;
  std::string host_;
  std::vector<int64_t> beats_;
  std::vector<std::chrono::steady_clock::time_point> since_;
};

}  // namespace

std::string shrink_process_key(int rank) { return "proc/" + std::to_string(rank); }

std::vector<std::shared_ptr<FrontDoor>> FrontDoor::live_children() const {
  std::vector<std::shared_ptr<FrontDoor>> out;
  std::lock_guard<std::mutex> g(children_mu_);
  for (const auto& w : children_)
    if (auto c = w.lock()) out.push_back(std::move(c));
  return out;
}

bool FrontDoor::failed_in_family() const {
  if (aborted_.load(std::memory_order_acquire) && !revoked_.load(std::memory_order_acquire)) return true;
  if (child_failed_.load(std::memory_order_acquire)) return true;
  for (const auto& c : live_children())
    if (c->failed_in_family()) return true;
  return false;
}

void FrontDoor::revoke(const std::string& reason, bool tell_peers) {
  {
    std::lock_guard<std::mutex> g(abort_mu_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }
  // After a failure the peers are told (the backend's abort): a survivor blocked on a live rank that has come
  // here, in this communicator or one split from it, fails at once and comes to shrink() too, instead of
  // waiting out the timeout. A shrink on purpose (exclude, nothing failed) stays local: telling would fail ops
  // that peers still run, and would finish, with ranks not here yet.
  revoked_.store(true, std::memory_order_release);
  aborted_.store(true, std::memory_order_release);
  if (tell_peers) backend_->abort(ErrorCode::revoked, reason);
  fail_pending();
  for (const auto& c : live_children()) c->revoke("its parent was revoked: " + reason, tell_peers);
}

std::unique_ptr<Communicator> FrontDoor::shrink(const std::vector<int>& exclude) {
  Backend& b = *backend_;
  const int n = b.size(), me = b.rank();
  const std::string who = "mpcomm: shrink #" + std::to_string(shrinks_) + " on rank " + std::to_string(me) + " of " +
                          std::to_string(n) + " [" + std::string(b.name()) + "]";
  if (!b.shrinks() || b.store() == nullptr)
    throw Unsupported(who + ": the " + std::string(b.name()) +
                      " backend cannot shrink (Open MPI 4 has no ULFM; nccl: the NCCL built against has no "
                      "ncclCommShrink and ncclCommRevoke, which came with 2.28)");
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  for (int r : exclude) {
    if (r < 0 || r >= n) throw InvalidArgument(who + ": exclude names rank " + std::to_string(r) + ", not a rank");
    if (excluded[static_cast<size_t>(r)])
      throw InvalidArgument(who + ": exclude names rank " + std::to_string(r) + " twice");
    excluded[static_cast<size_t>(r)] = true;
  }
  if (static_cast<int>(exclude.size()) == n) throw InvalidArgument(who + ": exclude names every rank");
  if (replaced_) throw InvalidArgument(who + ": this communicator was replaced by an earlier shrink() already");
  const bool revoked = revoked_.load(std::memory_order_acquire);  // by its parent's shrink()
  const bool failed = failed_in_family();                         // here, or in a communicator split from this one
  if (exclude.empty() && !failed && !revoked)
    throw InvalidArgument(who + ": the communicator has not failed; name the ranks to exclude to shrink it on purpose");
  const bool elastic = b.options().elastic > 0;
  if (failed && !elastic)
    throw Unsupported(who +
                      ": the failure was published as the job's abort, so the job is ending; with "
                      "Options::elastic (MPCOMM_ELASTIC=1, mpcomm launch --elastic) it ends this communicator only");

  // 1. Revoke (this communicator and those split from it), then check in.
  replaced_ = true;
  revoke("shrink() replaced it" + (exclude.empty() ? "" : " (excluding ranks " + list_of(exclude) + ")"), failed);
  if (excluded[static_cast<size_t>(me)]) {
    ++shrinks_;
    return nullptr;
  }
  // A member lost after it checked in (during the new communicator's setup) fails the setup on the others:
  // they agree again, under new keys, without it. Each round is bounded by the timeout; a round removes the
  // ranks lost since the last, so size() rounds at most.
  for (int round = 1;; ++round) {
    // A later round: the others of the failed setup may still be in it. A setup can fail at once on one rank (a
    // connection refused by the lost one) and only after several of its waits time out on another (gloo's full
    // mesh tries its peers one by one, each up to the timeout), so the live ones get up to ten timeouts to come;
    // the lost are left out as soon as they are known gone (their process ended or stopped on this host, their
    // heartbeat stalled on another), which is what ends such a round early.
    std::vector<int> members = agree(excluded, elastic, who, round == 1 ? 1 : 10);
    const auto at = std::find(members.begin(), members.end(), me);
    // The new communicator, as split() makes a group.
    SplitPlan plan;
    plan.color = 0;
    plan.members = members;
    plan.new_rank = static_cast<int>(at - members.begin());
    plan.seq = seq_;
    plan.recreate = recreate_;
    std::vector<std::string> hosts;
    for (int m : members)
      hosts.push_back(b.topology().host_names[static_cast<size_t>(b.topology().host_of_rank[static_cast<size_t>(m)])]);
    plan.topology = topology_from_hosts(hosts, plan.new_rank);
    const std::string base = "shrink" + std::to_string(shrinks_ - 1) + "/";
    plan.store = std::make_shared<PrefixStore>(base + "group", b.store());
    std::unique_ptr<Communicator> made;
    std::string why;
    try {
      made = make_communicator(b.shrunk(plan, failed || revoked), recreate_);
    } catch (const Error& e) {
      if ((e.code() != ErrorCode::timeout && e.code() != ErrorCode::peer_failure) || round >= n) throw;
      why = e.what();
    }
    // Kept only where every member made it: a setup can end well on one rank and fail on another (a member lost
    // after the others had what they needed from it), and the ones that made it must not go on without the rest.
    if (made == nullptr) b.store()->set_string(base + "unmade/" + std::to_string(me), "1");
    if (made != nullptr && all_made(members, base, who)) return made;
    made.reset();
    if (round >= n)
      throw PeerFailure(who + ": the communicator over ranks " + list_of(members) + " was not made on every one");
    MPCOMM_LOG(warn,
               "%s: the communicator over ranks %s was not made on every member (%s); agreeing again without the lost",
               who.c_str(), list_of(members).c_str(), why.empty() ? "another member's setup failed" : why.c_str());
  }
}

bool FrontDoor::all_made(const std::vector<int>& members, const std::string& base, const std::string& who) {
  Backend& b = *backend_;
  Store& store = *b.store();
  store.set_string(base + "made/" + std::to_string(b.rank()), "1");
  LostRanks lost(store, root_store(b.store()), b.options().host_id, b.size());
  // A member still in its setup ends it within its own waits; ten timeouts bound that (see shrink()).
  const auto deadline = std::chrono::steady_clock::now() + 10 * b.options().timeout;
  std::vector<bool> seen(static_cast<size_t>(b.size()), false);
  for (;;) {
    bool all = true;
    for (int m : members) {
      if (seen[static_cast<size_t>(m)]) continue;
      if (store.check({base + "made/" + std::to_string(m)})) {
        seen[static_cast<size_t>(m)] = true;
      } else if (store.check({base + "unmade/" + std::to_string(m)}) || lost.lost(m)) {
        return false;
      } else {
        all = false;
      }
    }
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline)
      throw Timeout(who + ": the members of the new communicator did not all say how their setup went");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::vector<int> FrontDoor::agree(const std::vector<bool>& excluded, bool elastic, const std::string& who,
                                  int timeouts) {
  Backend& b = *backend_;
  const int n = b.size(), me = b.rank();
  const std::string base = "shrink" + std::to_string(shrinks_++) + "/";
  Store& store = *b.store();
  const auto key = [&](const char* what, int r) { return base + what + "/" + std::to_string(r); };
  store.set_string(key("here", me), "1");

  // Wait for every rank here, excluded or gone, or the timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeouts * b.options().timeout;
  std::vector<bool> here(static_cast<size_t>(n), false), gone(static_cast<size_t>(n), false);
  here[static_cast<size_t>(me)] = true;
  LostRanks lost(store, root_store(b.store()), b.options().host_id, n);
  for (;;) {
    bool all = true;
    for (int q = 0; q < n; ++q) {
      const auto i = static_cast<size_t>(q);
      if (here[i] || gone[i] || excluded[i]) continue;
      if (store.check({key("here", q)})) {
        here[i] = true;
      } else if (elastic && lost.lost(q)) {
        gone[i] = true;
        store.set_string(key("gone", q), "1");
      } else if (store.check({key("gone", q)})) {
        gone[i] = true;
      } else {
        all = false;
      }
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  // One writer of the members; every caller reads them.
  if (store.add(base + "decide", 1) == 1) {
    std::vector<int> members;
    for (int q = 0; q < n; ++q)
      if (!excluded[static_cast<size_t>(q)] && (here[static_cast<size_t>(q)] || store.check({key("here", q)})))
        members.push_back(q);
    store.set_string(base + "members", list_of(members));
  }
  std::vector<int> members = parse_list(store.get_string(base + "members", b.options().timeout));
  if (std::find(members.begin(), members.end(), me) == members.end())
    throw PeerFailure(who + ": counted out: the others agreed on ranks " + list_of(members) +
                      " before this rank checked in");
  return members;
}

}  // namespace mpcomm::detail
