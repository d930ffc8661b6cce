#include "parallel/elastic.h"

#include <algorithm>
#include <chrono>
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

std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  for (int x : a)
    if (std::find(b.begin(), b.end(), x) == b.end()) out.push_back(x);
  return out;
}

}  // namespace

ElasticResult train_elastic(const TrainConfig& cfg, Communicator& world, const ElasticHooks& hooks) {
  blas_single_thread();
  ResolvedRun run = resolve(cfg, world.size());
  run.cfg.elastic = true;
  if (run.cfg.micro_size == 0) run.cfg.micro_size = cfg.batch / (cfg.dims.dp * cfg.micro_batches);
  ElasticResult result;
  Communicator* w = &world;  // the world training runs on
  struct Made {  // the communicators recovery made, kept to the end and closed in reverse order (children first)
    std::vector<std::unique_ptr<Communicator>> v;
    ~Made() {
      while (!v.empty()) v.pop_back();
    }
  } made;
  std::vector<int> starting(static_cast<size_t>(world.size()));  // starting-world rank of each rank of w
  for (int r = 0; r < world.size(); ++r) starting[static_cast<size_t>(r)] = r;
  const int my_start = world.rank();
  int next = 0;                           // the first step not finished
  TrainerState before_next, before_prev;  // the state before step `next`, and before the step that preceded it
  bool have_next = false, have_prev = false;
  std::vector<double> earlier;  // the stats of the trainers replaced
  std::vector<int> lost, left;
  const auto t0 = Clock::now();
  Clock::time_point failed_at{};
  Recovery recovering;
  bool in_recovery = false;
  for (;;) {
    std::optional<ParallelGroups> groups;
    std::unique_ptr<Trainer> trainer;
    auto step_start = Clock::now();
    std::string cause;
    try {
      groups.emplace(ParallelGroups::create(*w, run.cfg.dims));
      trainer = std::make_unique<Trainer>(run, *groups, have_next ? &before_next : nullptr);
      if (in_recovery) {
        recovering.rebuild_s = since(failed_at);
        result.recoveries.push_back(recovering);
        if (hooks.on_recovery) hooks.on_recovery(recovering, *w);
        in_recovery = false;
      }
      for (; next < run.cfg.steps; ++next) {
        step_start = Clock::now();
        trainer->save_state(before_next);
        have_next = true;
        const double loss = trainer->step(next);
        std::swap(before_prev, before_next);
        have_prev = true;
        result.losses.resize(static_cast<size_t>(next));
        result.losses.push_back(loss);
        if (hooks.on_step) hooks.on_step(next, loss, since(step_start), *w);
      }
      result.seconds = since(t0);
      finish_run(run, *trainer, *groups, *w, result, earlier);
      return result;
    } catch (const Error& e) {
      if (!is_failure(e)) throw;
      cause = e.what();
    }
    failed_at = Clock::now();
    recovering = Recovery{};
    recovering.detect_s = std::chrono::duration<double>(failed_at - step_start).count();
    recovering.cause = cause;
    if (trainer) {  // what it did counts in the run's stats
      record_spent(*trainer, *groups);
      const std::vector<double> v = trainer->stats().to_vector();
      earlier.resize(v.size(), 0.0);
      for (size_t i = 0; i < v.size(); ++i) earlier[i] += v[i];
    }

    // Shrink w, then agree on who goes on; a rank lost meanwhile: shrink the shrunk one again. A shrink that
    // throws counted this rank out (the others went on without it): it ends with that error.
    const ParallelDims dims = run.cfg.dims;
    const Coords me = coords_of(w->rank(), dims);
    Communicator* failing = w;
    bool no_replica = false;
    for (;;) {
      made.v.push_back(failing->shrink());
      Communicator& shrunk = *made.v.back();
      failing = &shrunk;
      trainer.reset(), groups.reset();  // their communicators were revoked with w
      try {
        const int mine[5] = {my_start, me.tp, me.pp, me.dp, next};
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
        made.v.push_back(shrunk.split(goes_on ? 0 : -1, key));
        std::vector<int> here;
        for (const auto& s : survivors) here.push_back(s.start_rank);
        for (int r : minus(starting, here)) lost.push_back(r);
        for (int r : minus(here, plan.starting_ranks)) left.push_back(r);
        if (!goes_on) {  // this rank's replica lost a rank: it leaves
          result.left = true;
          result.seconds = since(t0);
          return result;
        }
        w = made.v.back().get();
        if (plan.next < next) {  // this rank finished the step some did not: back to the state before it
          if (!have_prev)
            throw Internal("elastic training: rank " + std::to_string(my_start) + " must go back to step " +
                           std::to_string(plan.next) + " and holds no state from before it");
          std::swap(before_next, before_prev);
          have_prev = false;
        }
        next = plan.next;
        result.losses.resize(static_cast<size_t>(next));
        run.cfg.dims = now;
        starting = plan.starting_ranks;
        recovering.step = next, recovering.dp = now.dp, recovering.lost = lost, recovering.left = left;
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
