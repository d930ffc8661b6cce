#include "parallel/elastic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "mpcomm/error.h"
#include "parallel/kernels.h"

namespace mpcomm::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What shrink() recovers from: a peer lost, an op timed out, or the communicator revoked by a survivor.
bool is_failure(const Error& e) {
  return e.code() == ErrorCode::peer_failure || e.code() == ErrorCode::timeout || e.code() == ErrorCode::revoked;
}

// One survivor, as the others learn it after a shrink.
struct Survivor {
  int start_rank = 0;  // in the starting world
  Coords at;           // in the world that failed
  int next = 0;        // the first step it has not finished
};

// Where the survivors go on: the replicas of the failed world whose tp × pp ranks all survived, renumbered in
// their order; the earliest step not every one of them finished.
struct Plan {
  std::vector<int> whole;  // dp indices, in the failed world, of the replicas that go on
  int next = 0;
  std::vector<int> starting_ranks;  // of the new world, in its rank order
};

Plan plan_of(const std::vector<Survivor>& all, const ParallelDims& dims) {
  std::map<int, int> count;
  for (const auto& s : all) ++count[s.at.dp];
  Plan p;
  for (auto [dp, n] : count)
    if (n == dims.tp * dims.pp) p.whole.push_back(dp);
  int lo = -1, hi = -1;
  for (const auto& s : all)
    if (count[s.at.dp] == dims.tp * dims.pp) {
      lo = lo < 0 ? s.next : std::min(lo, s.next);
      hi = std::max(hi, s.next);
    }
  // Every step ends with ops over every replica (the data-parallel sum, the loss's broadcast): no rank can
  // finish a step before every other rank has finished the one before.
  if (hi - lo > 1)
    throw Internal("elastic training: the survivors are " + std::to_string(hi - lo) + " steps apart (" +
                   std::to_string(lo) + " to " + std::to_string(hi) + "); at most one is possible");
  p.next = lo;
  ParallelDims now = dims;
  now.dp = static_cast<int>(p.whole.size());
  p.starting_ranks.assign(static_cast<size_t>(now.world()), -1);
  for (const auto& s : all) {
    const auto at = std::find(p.whole.begin(), p.whole.end(), s.at.dp);
    if (at == p.whole.end()) continue;
    const Coords c{s.at.tp, s.at.pp, static_cast<int>(at - p.whole.begin())};
    p.starting_ranks[static_cast<size_t>(rank_of(c, now))] = s.start_rank;
  }
  return p;
}

// Thrown where a failure cannot be recovered from: not an Error, so the recovery's catch lets it through.
struct Unrecoverable {
  std::string why;
};

void add_once(std::vector<int>& to, int x) {
  if (std::find(to.begin(), to.end(), x) == to.end()) to.push_back(x);
}

// A rank out of the world that goes on (its replica broke, or shrink() counted it out): it waits in join() to
// come back with its replica (grow_back), or leaves. A join that times out or is closed leaves too.
std::unique_ptr<Communicator> rejoin(Communicator& member, bool grow_back) {
  if (!grow_back) return nullptr;
  try {
    return join(member);
  } catch (const Timeout&) {
    return nullptr;
  }
}

std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  for (int x : a)
    if (std::find(b.begin(), b.end(), x) == b.end()) out.push_back(x);
  return out;
}

// The run's state on this rank, as recovery and growing change it.
struct Run {
  ResolvedRun run;
  int start_dp = 1;
  Communicator* w = nullptr;                        // the world training runs on
  std::vector<std::unique_ptr<Communicator>> made;  // the communicators made on the way, kept to the end
  std::vector<int> starting;                        // starting-world rank of each rank of w (-1: unknown)
  int my_start = -1;
  int next = 0;                           // the first step not finished
  TrainerState before_next, before_prev;  // the state before step `next`, and before the step that preceded it
  bool have_next = false, have_prev = false;
  bool stateless = false;       // a joiner that has not received the others' state yet
  std::vector<double> earlier;  // the stats of the trainers replaced
  std::vector<int> lost, left;

  ~Run() {  // children before the communicators they were split from
    while (!made.empty()) made.pop_back();
  }
  int shard() const { return run.cfg.dims.tp * run.cfg.dims.pp; }

  void keep_stats(Trainer& trainer, ParallelGroups& groups) {
    record_spent(trainer, groups);
    const std::vector<double> v = trainer.stats().to_vector();
    earlier.resize(v.size(), 0.0);
    for (size_t i = 0; i < v.size(); ++i) earlier[i] += v[i];
  }

  // Collective over `grown` (from grow() on the ranks that train, from join() on the joiners): the joiners
  // become the next replicas, dealt out tp fastest, then pp, in the order they came; the world is made anew
  // in the trainer's rank order.
  void adopt(Communicator& grown, bool joiner) {
    const ParallelDims dims = run.cfg.dims;
    const Coords me = joiner ? Coords{-1, -1, -1} : coords_of(w->rank(), dims);
    const int mine[6] = {joiner ? 1 : 0, my_start, me.tp, me.pp, me.dp, next};
    std::vector<int> all(6 * static_cast<size_t>(grown.size()));
    grown.allgather(mine, all.data(), 6, DataType::int32);
    int dp_old = 0, joiners = 0, old_next = -1;
    for (size_t i = 0; i < all.size(); i += 6) {
      if (all[i] != 0) {
        ++joiners;
        continue;
      }
      dp_old = std::max(dp_old, all[i + 4] + 1);
      if (old_next >= 0 && all[i + 5] != old_next)
        throw Internal("elastic training: the ranks that grew are at different steps (" + std::to_string(old_next) +
                       " and " + std::to_string(all[i + 5]) + ", starting rank " + std::to_string(all[i + 1]) + ")");
      old_next = all[i + 5];
    }
    if (joiners % shard() != 0 || old_next < 0)
      throw Internal("elastic training: " + std::to_string(joiners) + " joiners do not make whole replicas of " +
                     std::to_string(shard()) + " ranks");
    ParallelDims now = dims;
    now.dp = dp_old + joiners / shard();
    std::vector<int> new_starting(static_cast<size_t>(now.world()), -1);
    Coords mine_now = me;
    for (size_t i = 0, j = 0; i < all.size(); i += 6) {
      Coords c{all[i + 2], all[i + 3], all[i + 4]};
      if (all[i] != 0) {
        const int s = static_cast<int>(j % static_cast<size_t>(shard()));
        c = {s % dims.tp, s / dims.tp, dp_old + static_cast<int>(j / static_cast<size_t>(shard()))};
        ++j;
      }
      new_starting[static_cast<size_t>(rank_of(c, now))] = all[i + 1];
      if (static_cast<int>(i / 6) == grown.rank()) mine_now = c;
    }
    made.push_back(grown.split(0, rank_of(mine_now, now)));
    w = made.back().get();
    starting = std::move(new_starting);
    run.cfg.dims = now;
    if (joiner) next = old_next, have_next = false, have_prev = false, stateless = true;
  }
};

}  // namespace

ElasticResult train_elastic(const TrainConfig& cfg, Communicator& world, const ElasticHooks& hooks, int joined_as) {
  blas_single_thread();
  Run r;
  const bool joining = joined_as >= 0;
  r.run = resolve(cfg, joining ? cfg.dims.world() : world.size());
  r.run.cfg.elastic = true;
  if (r.run.cfg.micro_size == 0) r.run.cfg.micro_size = cfg.batch / (cfg.dims.dp * cfg.micro_batches);
  r.start_dp = cfg.dims.dp;
  r.w = &world;
  r.my_start = joining ? joined_as : world.rank();
  if (!joining)
    for (int q = 0; q < world.size(); ++q) r.starting.push_back(q);
  ElasticResult result;
  const auto t0 = Clock::now();
  Clock::time_point failed_at{};
  Recovery recovering;
  bool in_recovery = false;
  Communicator* grown = joining ? &world : nullptr;  // to adopt before training goes on
  Clock::time_point grow_began = Clock::now();       // (a joiner: when it came)
  bool is_joiner = joining;
  for (;;) {
    std::optional<ParallelGroups> groups;
    std::unique_ptr<Trainer> trainer;
    auto step_start = Clock::now();
    std::string cause;
    try {
      if (grown != nullptr) {
        r.adopt(*grown, is_joiner);
        grown = nullptr;
        groups.emplace(ParallelGroups::create(*r.w, r.run.cfg.dims));
        trainer = std::make_unique<Trainer>(r.run, *groups, r.have_next ? &r.before_next : nullptr);
        trainer->take_state_from(0);  // data-parallel rank 0 is a replica that trained all along
        r.stateless = false;
        if (is_joiner) result.losses.assign(static_cast<size_t>(r.next), std::nan(""));
        is_joiner = false;
        Recovery grew;
        grew.grew = true, grew.step = r.next, grew.dp = r.run.cfg.dims.dp, grew.lost = r.lost, grew.left = r.left;
        grew.rebuild_s = since(grow_began);
        result.recoveries.push_back(grew);
        if (hooks.on_recovery) hooks.on_recovery(grew, *r.w);
      } else {
        groups.emplace(ParallelGroups::create(*r.w, r.run.cfg.dims));
        trainer = std::make_unique<Trainer>(r.run, *groups, r.have_next ? &r.before_next : nullptr);
      }
      if (in_recovery) {
        // A joiner that lost a peer before it got the state takes it now, from a replica that trained.
        int32_t need[2] = {r.stateless ? 1 : 0, r.stateless && groups->me.dp == 0 ? 1 : 0};
        r.w->allreduce(need, need, 2, DataType::int32, ReduceOp::max);
        if (need[1] != 0) throw Unrecoverable{"every replica that trained was lost while replicas joined"};
        if (need[0] != 0) trainer->take_state_from(0), r.stateless = false;
        recovering.rebuild_s = since(failed_at);
        result.recoveries.push_back(recovering);
        if (hooks.on_recovery) hooks.on_recovery(recovering, *r.w);
        in_recovery = false;
      }
      for (; r.next < r.run.cfg.steps; ++r.next) {
        step_start = Clock::now();
        trainer->save_state(r.before_next);
        r.have_next = true;
        if (cfg.grow_back && r.run.cfg.dims.dp < r.start_dp) {  // whole replicas waiting to come back?
          int64_t waiting = r.w->rank() == 0 ? waiting_joiners(*r.w) : 0;
          r.w->broadcast(&waiting, 1, DataType::int64, 0);
          const int add = static_cast<int>(std::min<int64_t>(waiting / r.shard(), r.start_dp - r.run.cfg.dims.dp));
          if (add > 0) {
            grow_began = Clock::now();
            r.made.push_back(r.w->grow(add * r.shard()));
            grown = r.made.back().get();
            break;
          }
        }
        const double loss = trainer->step(r.next);
        std::swap(r.before_prev, r.before_next);
        r.have_prev = true;
        result.losses.resize(static_cast<size_t>(r.next));
        result.losses.push_back(loss);
        if (hooks.on_step) hooks.on_step(r.next, loss, since(step_start), *r.w);
      }
      if (grown != nullptr) {  // rebuild at the larger dp
        r.keep_stats(*trainer, *groups);
        continue;
      }
      if (cfg.grow_back && r.w->rank() == 0) close_joins(*r.w);  // nobody waits in join() for a grow to come
      result.seconds = since(t0);
      finish_run(r.run, *trainer, *groups, *r.w, result, r.earlier);
      return result;
    } catch (const Error& e) {
      if (!is_failure(e)) throw;
      cause = e.what();
      grown = nullptr;
    } catch (const Unrecoverable& u) {
      throw PeerFailure("elastic training: " + u.why + "; nothing is left to go on");
    }
    failed_at = Clock::now();
    recovering = Recovery{};
    recovering.detect_s = std::chrono::duration<double>(failed_at - step_start).count();
    recovering.cause = cause;
    if (trainer) r.keep_stats(*trainer, *groups);

    // Shrink w, then agree on who goes on; a rank lost meanwhile: shrink the shrunk one again. A shrink that
    // throws counted this rank out (the others went on without it): it ends with that error.
    const ParallelDims dims = r.run.cfg.dims;
    const Coords me = coords_of(r.w->rank(), dims);
    Communicator* failing = r.w;
    bool no_replica = false;
    // This rank is out of the world that goes on: it waits to come back (true: `grown` is its way in) or leaves.
    const auto out_of_the_world = [&](Communicator& member) {
      std::unique_ptr<Communicator> back = rejoin(member, cfg.grow_back);
      if (back == nullptr) {
        result.left = true;
        result.seconds = since(t0);
        return false;
      }
      r.made.push_back(std::move(back));
      grown = r.made.back().get();
      is_joiner = true;
      return true;
    };
    for (;;) {
      std::unique_ptr<Communicator> next_comm;
      try {
        next_comm = failing->shrink();
      } catch (const Error& e) {  // counted out: the others agreed without this rank
        if (!is_failure(e)) throw;
        trainer.reset(), groups.reset();
        if (!out_of_the_world(*failing)) return result;
        break;
      }
      r.made.push_back(std::move(next_comm));
      Communicator& shrunk = *r.made.back();
      failing = &shrunk;
      trainer.reset(), groups.reset();  // their communicators were revoked with w
      try {
        const int mine[5] = {r.my_start, me.tp, me.pp, me.dp, r.next};
        std::vector<int> all(5 * static_cast<size_t>(shrunk.size()));
        shrunk.allgather(mine, all.data(), 5, DataType::int32);
        std::vector<Survivor> survivors;
        for (size_t i = 0; i < all.size(); i += 5)
          survivors.push_back({all[i], {all[i + 1], all[i + 2], all[i + 3]}, all[i + 4]});
        const Plan plan = plan_of(survivors, dims);
        if (plan.whole.empty()) {
          no_replica = true;
          break;
        }
        const auto at = std::find(plan.whole.begin(), plan.whole.end(), me.dp);
        ParallelDims now = dims;
        now.dp = static_cast<int>(plan.whole.size());
        const bool goes_on = at != plan.whole.end();
        const int key = goes_on ? rank_of({me.tp, me.pp, static_cast<int>(at - plan.whole.begin())}, now) : 0;
        r.made.push_back(shrunk.split(goes_on ? 0 : -1, key));
        std::vector<int> here;
        for (const auto& s : survivors) here.push_back(s.start_rank);
        for (int q : minus(r.starting, here)) add_once(r.lost, q);
        for (int q : minus(here, plan.starting_ranks)) add_once(r.left, q);
        if (!goes_on) {  // this rank's replica lost a rank: it leaves, or waits to come back with it
          if (!out_of_the_world(shrunk)) return result;
          break;
        }
        r.w = r.made.back().get();
        if (plan.next < r.next) {  // this rank finished the step some did not: back to the state before it
          if (!r.have_prev)
            throw Internal("elastic training: rank " + std::to_string(r.my_start) + " must go back to step " +
                           std::to_string(plan.next) + " and holds no state from before it");
          std::swap(r.before_next, r.before_prev);
          r.have_prev = false;
        }
        r.next = plan.next;
        result.losses.resize(static_cast<size_t>(r.next));
        r.run.cfg.dims = now;
        r.starting = plan.starting_ranks;
        recovering.step = r.next, recovering.dp = now.dp, recovering.lost = r.lost, recovering.left = r.left;
        in_recovery = true;
        break;
      } catch (const Error& e) {
        if (!is_failure(e)) throw;
        recovering.cause += "; then " + std::string(e.what());
      }
    }
    if (no_replica)
      throw PeerFailure("elastic training: every data-parallel replica lost a rank (the last failure: " + cause +
                        "); nothing is left to go on");
  }
}

}  // namespace mpcomm::parallel
