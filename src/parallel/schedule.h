// Pipeline-parallel schedule: for one training step, the ordered list of actions one pipeline stage runs —
// receive activations, forward, send activations, receive gradients, backward, send gradients — per
// micro-batch. The trainer executes the list as written; this file decides nothing at run time, so the
// schedule can be tested here without any communication (`simulate`).
//
// Execution model (what the trainer does and what `simulate` assumes): a receive blocks until the
// neighbour stage has sent that micro-batch in that direction; a send is an isend that never blocks, and
// all of a step's sends are waited at the end of the step. Under that model every list produced here
// completes: no stage waits on a send that comes after its own wait in a cycle.
//
// Guarantees of pipeline_schedule(kind, s, S, M):
//   - forward(m) and backward(m) each appear exactly once per micro-batch m, in order m = 0..M-1;
//   - forward(m) is preceded by recv_forward(m) unless s = 0 and followed by send_forward(m) unless
//     s = S-1; backward(m) is preceded by recv_backward(m) unless s = S-1 (its gradient starts at the
//     loss) and followed by send_backward(m) unless s = 0;
//   - GPipe runs all M forwards, then all M backwards: stage s holds the activations of M micro-batches.
//   - 1F1B (PipeDream-flush, as in Megatron-LM) runs min(S-s-1, M) warm-up forwards, then alternates one
//     forward and one backward, then drains the remaining backwards: stage s holds the activations of at
//     most min(S-s, M) micro-batches, independent of M. Both have the same bubble, (S-1)(f+b) per step.
//   - Interleaved 1F1B (Megatron-LM's virtual pipeline): each of the S ranks holds V model chunks; chunk v of
//     rank s is virtual stage v·S + s of S·V, so a micro-batch passes every rank V times. Forwards go in
//     groups of S micro-batches through chunk 0, then chunk 1, ...; backwards mirror them from the last chunk;
//     rank s warms up with (S-s-1)·2 + (V-1)·S forwards (all M·V when M == S). A chunk is 1/V of a stage, so
//     the bubble shrinks to (S-1)(f+b)/V: (S-1)/(V·M) of the ideal time. Needs M a multiple of S.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mpcomm::parallel {

enum class ScheduleKind { one_f_one_b, gpipe, interleaved };

// "1f1b" | "gpipe" | "interleaved"; throws InvalidArgument otherwise. to_string gives back the same names.
ScheduleKind parse_schedule(std::string_view name);
std::string_view to_string(ScheduleKind kind);

enum class ActionKind { recv_forward, forward, send_forward, recv_backward, backward, send_backward };

struct Action {
  ActionKind kind;
  int micro;      // micro-batch index, 0..M-1
  int chunk = 0;  // interleaved: the rank's model chunk, 0..V-1 (virtual stage chunk·S + stage)
  bool operator==(const Action&) const = default;
};

// "RF3" "F3" "SF3" "RB0" "B0" "SB0" (chunk 1: "F3@1"); a list is space-separated.
std::string to_string(const Action& a);
std::string to_string(const std::vector<Action>& actions);

// The actions of stage `stage` (0..stages-1) for one step of `micro_batches` micro-batches.
// Throws InvalidArgument for stages < 1, stage out of range or micro_batches < 1.
// `virtual_stages` (V, the chunks per rank) is read by interleaved only, which also throws InvalidArgument
// unless V >= 1 and micro_batches is a multiple of stages.
std::vector<Action> pipeline_schedule(ScheduleKind kind, int stage, int stages, int micro_batches,
                                      int virtual_stages = 1);

// --- Simulation (tests and planning) ---
// Runs every stage's list against its neighbours under the execution model above: sends are instant and
// never block, a receive waits for the matching send from the neighbour stage, forward and backward take
// their cost and communication takes no time. Checks, and reports the first violation with stage, action
// index and micro-batch: the lists finish (no deadlock), each send is received exactly once and each
// receive has a send, data dependencies hold (forward needs its recv_forward, send needs its compute,
// backward needs the forward of the same micro-batch and its recv_backward), no compute runs twice.
struct SimOptions {
  double forward_cost = 1, backward_cost = 2;
};

struct SimResult {
  bool ok = false;
  std::string error;                // first problem found; empty when ok
  double makespan = 0;              // time the last stage finishes
  std::vector<double> idle;         // per stage: makespan minus compute time
  std::vector<int> peak_in_flight;  // per stage: most micro-batches with forward done, backward not
  double bubble_fraction() const;   // mean over stages of idle / makespan
};

// One list per rank; with virtual_stages V > 1 an action's chunk says which virtual stage it belongs to, and
// the neighbours are virtual stages (rank S-1's chunk v sends to rank 0's chunk v+1). forward_cost and
// backward_cost are per action: for a chunk of 1/V of a stage, pass 1/V of a stage's costs.
SimResult simulate(const std::vector<std::vector<Action>>& stages, SimOptions options = {}, int virtual_stages = 1);

}  // namespace mpcomm::parallel
