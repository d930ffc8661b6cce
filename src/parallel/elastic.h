// Training that survives a lost rank (TrainConfig::elastic): when a step fails with a peer failure, a timeout
// or a revoke, every survivor shrinks the world (Communicator::shrink), the replicas that lost a rank leave
// (their other ranks return), and the rest rebuild their groups at dp - 1 and go on from the step in flight:
//   - the same global batch and micro-batch size: the batch's micro-batches are dealt out anew over the
//     remaining replicas (TrainConfig::micro_size);
//   - no checkpoint is read: every rank keeps its parameters and optimizer state in memory, and the state
//     before its last finished step, because a failure can end a step on some ranks and not on others (its
//     last op, the loss's broadcast): the survivors agree on the earliest step not finished everywhere and
//     those that finished it go back one;
//   - with TrainConfig::reproducible the sums do not depend on dp, so the losses and the saved model are
//     the bits of a run that lost nothing.
// A failure during the recovery itself (a second rank lost) shrinks again. With TrainConfig::grow_back, whole
// replicas of processes that join (mpcomm::join: a lost rank started again, and the ranks its replica lost it
// with) are grown in at a step boundary and receive the parameters and optimizer state over the network.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/trainer.h"

namespace mpcomm::parallel {

// One recovery, as the ranks that go on saw it.
struct Recovery {
  bool grew = false;      // replicas grew back in (else: a failure was survived)
  int step = 0;           // the step training went on from
  int dp = 0;             // the data-parallel replicas left
  std::vector<int> lost;  // ranks of the starting world lost so far (listed once, also if started again)
  std::vector<int> left;  // ranks of the starting world that left with a broken replica so far (once each)
  double detect_s = 0;    // the failed step's start to the failure seen (on this rank)
  double rebuild_s = 0;   // the failure seen to the new groups and trainer ready
  std::string cause;      // the failure's message, on this rank
};

struct ElasticHooks {
  // After each step, on every rank that goes on; `world`: the communicator training runs on now (its rank 0
  // is the one to report).
  std::function<void(int k, double loss, double seconds, const Communicator& world)> on_step;
  std::function<void(const Recovery&, const Communicator& world)> on_recovery;
};

// A run whose losses come back empty and whose `left` is set ended on a rank of a broken replica.
struct ElasticResult : TrainResult {
  bool left = false;
  std::vector<Recovery> recoveries;
};

// The whole run on one rank of `world`, which must be elastic (Options::elastic; mpcomm launch --elastic).
// joined_as >= 0: `world` came from mpcomm::join() (a restart of rank joined_as of the starting world, for the
// reports); the process trains from the step the others are at, with their state. With cfg.grow_back the ranks
// of a broken replica wait in join() to come back with it, and the ranks that train take whole replicas of
// joiners in at step boundaries, up to the starting dp.
ElasticResult train_elastic(const TrainConfig& cfg, Communicator& world, const ElasticHooks& hooks = {},
                            int joined_as = -1);

}  // namespace mpcomm::parallel
