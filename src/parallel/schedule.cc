#include "parallel/schedule.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "mpcomm/error.h"

namespace mpcomm::parallel {

ScheduleKind parse_schedule(std::string_view name) {
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "interleaved") return ScheduleKind::interleaved;
  throw InvalidArgument("pipeline schedule '" + std::string(name) + "' is not one of 1f1b, gpipe, interleaved");
}

std::string_view to_string(ScheduleKind kind) {
  return kind == ScheduleKind::gpipe ? "gpipe" : kind == ScheduleKind::interleaved ? "interleaved" : "1f1b";
}

std::string to_string(const Action& a) {
  static constexpr const char* kNames[] = {"RF", "F", "SF", "RB", "B", "SB"};
  return kNames[static_cast<int>(a.kind)] + std::to_string(a.micro) +
         (a.chunk != 0 ? "@" + std::to_string(a.chunk) : std::string());
}

std::string to_string(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) out += (out.empty() ? "" : " ") + to_string(a);
  return out;
}

// --- Schedule ---
// Both schedules are an order of forward/backward computations; the communication around each one is
// the same everywhere, so it is added in one place.
namespace {

// Megatron-LM's interleaved order (schedules.py, forward_backward_pipelining_with_interleaving): the k-th
// forward of a rank runs chunk (k / S) % V on micro-batch (k / (S·V))·S + k % S; the k-th backward the same
// micro-batch on chunk V-1-(k / S) % V.
std::vector<Action> interleaved(int stage, int stages, int micro_batches, int chunks) {
  if (chunks < 1) throw InvalidArgument("interleaved schedule: --virtual-stages must be at least 1");
  if (micro_batches % stages != 0)
    throw InvalidArgument("interleaved schedule: --micro-batches " + std::to_string(micro_batches) +
                          " is not a multiple of the " + std::to_string(stages) + " pipeline stages");
  const int S = stages, V = chunks, total = micro_batches * V, last_vs = S * V - 1;
  std::vector<Action> out;
  auto at = [&](int k, bool backward) {
    const int chunk = (k / S) % V;
    return std::pair{backward ? V - 1 - chunk : chunk, (k / (S * V)) * S + k % S};
  };
  auto forward = [&](int k) {
    const auto [c, m] = at(k, false);
    const int vs = c * S + stage;
    if (vs > 0) out.push_back({ActionKind::recv_forward, m, c});
    out.push_back({ActionKind::forward, m, c});
    if (vs < last_vs) out.push_back({ActionKind::send_forward, m, c});
  };
  auto backward = [&](int k) {
    const auto [c, m] = at(k, true);
    const int vs = c * S + stage;
    if (vs < last_vs) out.push_back({ActionKind::recv_backward, m, c});
    out.push_back({ActionKind::backward, m, c});
    if (vs > 0) out.push_back({ActionKind::send_backward, m, c});
  };
  const int warmup = micro_batches == S ? total : std::min(total, (S - stage - 1) * 2 + (V - 1) * S);
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int i = 0; i < total - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int i = total - warmup; i < total; ++i) backward(i);
  return out;
}

}  // namespace

std::vector<Action> pipeline_schedule(ScheduleKind kind, int stage, int stages, int micro_batches,
                                      int virtual_stages) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
    throw InvalidArgument("pipeline_schedule: need 0 <= stage < stages and micro_batches >= 1, got stage " +
                          std::to_string(stage) + ", stages " + std::to_string(stages) + ", micro_batches " +
                          std::to_string(micro_batches));
  if (kind == ScheduleKind::interleaved) return interleaved(stage, stages, micro_batches, virtual_stages);
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<Action> out;
  auto forward = [&](int m) {
    if (!first) out.push_back({ActionKind::recv_forward, m});
    out.push_back({ActionKind::forward, m});
    if (!last) out.push_back({ActionKind::send_forward, m});
  };
  auto backward = [&](int m) {
    if (!last) out.push_back({ActionKind::recv_backward, m});
    out.push_back({ActionKind::backward, m});
    if (!first) out.push_back({ActionKind::send_backward, m});
  };
  // GPipe is 1F1B whose warm-up covers every micro-batch.
  const int warmup = kind == ScheduleKind::gpipe ? micro_batches : std::min(stages - stage - 1, micro_batches);
  int next_f = 0, next_b = 0;
  while (next_f < warmup) forward(next_f++);
  while (next_f < micro_batches) {  // steady state: the backward of the oldest micro-batch follows each forward
    forward(next_f++);
    backward(next_b++);
  }
  while (next_b < micro_batches) backward(next_b++);
  return out;
}

// --- Simulation ---

double SimResult::bubble_fraction() const {
  if (idle.empty() || makespan <= 0) return 0;
  double sum = 0;
  for (double i : idle) sum += i / makespan;
  return sum / static_cast<double>(idle.size());
}

namespace {

bool is_recv(ActionKind k) { return k == ActionKind::recv_forward || k == ActionKind::recv_backward; }
bool is_send(ActionKind k) { return k == ActionKind::send_forward || k == ActionKind::send_backward; }
bool is_forward_direction(ActionKind k) { return k == ActionKind::recv_forward || k == ActionKind::send_forward; }

// The virtual stage a communication action of virtual stage vs talks to: activations flow to vs+1, gradients
// to vs-1. (Without interleaving a virtual stage is a stage.)
int peer_of(ActionKind k, int vs) {
  return k == ActionKind::recv_forward || k == ActionKind::send_backward ? vs - 1 : vs + 1;
}

// A message is named by its direction, the virtual stage that receives it and its micro-batch.
using MessageKey = std::tuple<bool, int, int>;
struct Message {
  double sent_at;
  int sender_action;
};

// What a rank has done, by (virtual stage, micro-batch).
using Done = std::set<std::pair<int, int>>;
struct StageState {
  size_t next = 0;  // index of the next action to run
  double clock = 0, busy = 0;
  Done got_activation, got_gradient, forward_done, backward_done;
  int peak = 0;
};

std::string where(int s, size_t i, const Action& a) {
  return "stage " + std::to_string(s) + ", action " + std::to_string(i) + " (" + to_string(a) + ")";
}

}  // namespace

SimResult simulate(const std::vector<std::vector<Action>>& lists, SimOptions options, int virtual_stages) {
  SimResult r;
  const int n = static_cast<int>(lists.size()), V = std::max(1, virtual_stages), N = n * V;
  if (n == 0) {
    r.error = "simulate: no stages";
    return r;
  }
  std::vector<StageState> st(n);
  std::map<MessageKey, Message> in_transit;
  auto vstage = [&](int s, const Action& a) { return a.chunk * n + s; };

  // Runs stage s's next action. Returns an error, or sets `blocked` when a receive has nothing to take.
  auto step = [&](int s, bool& blocked) -> std::optional<std::string> {
    StageState& me = st[s];
    const size_t i = me.next;
    const Action& a = lists[s][i];
    const int m = a.micro;
    auto fail = [&](const std::string& why) { return where(s, i, a) + ": " + why; };
    if (a.chunk < 0 || a.chunk >= V) return fail("chunk " + std::to_string(a.chunk) + " out of range");
    const int vs = vstage(s, a);
    const std::pair<int, int> key{vs, m};
    if (is_recv(a.kind) || is_send(a.kind)) {
      const int peer = peer_of(a.kind, vs);
      if (peer < 0 || peer >= N) return fail("no stage " + std::to_string(peer) + " to talk to");
      if (is_recv(a.kind)) {
        auto it = in_transit.find({is_forward_direction(a.kind), vs, m});
        if (it == in_transit.end()) {
          blocked = true;
          return std::nullopt;
        }
        me.clock = std::max(me.clock, it->second.sent_at);
        in_transit.erase(it);
        (a.kind == ActionKind::recv_forward ? me.got_activation : me.got_gradient).insert(key);
      } else {
        const bool fwd = a.kind == ActionKind::send_forward;
        if (!(fwd ? me.forward_done : me.backward_done).count(key))
          return fail(std::string("sends before its ") + (fwd ? "forward" : "backward") + " has run");
        if (!in_transit.emplace(MessageKey{fwd, peer, m}, Message{me.clock, static_cast<int>(i)}).second)
          return fail("sends a message that is already in flight");
      }
    } else if (a.kind == ActionKind::forward) {
      if (me.forward_done.count(key)) return fail("forward runs twice");
      if (vs > 0 && !me.got_activation.count(key)) return fail("forward before its recv_forward");
      me.forward_done.insert(key);
      me.clock += options.forward_cost;
      me.busy += options.forward_cost;
      me.peak = std::max(me.peak, static_cast<int>(me.forward_done.size() - me.backward_done.size()));
    } else {  // backward
      if (me.backward_done.count(key)) return fail("backward runs twice");
      if (!me.forward_done.count(key)) return fail("backward before forward of the same micro-batch");
      if (vs < N - 1 && !me.got_gradient.count(key)) return fail("backward before its recv_backward");
      me.backward_done.insert(key);
      me.clock += options.backward_cost;
      me.busy += options.backward_cost;
    }
    ++me.next;
    return std::nullopt;
  };

  // Results do not depend on the order stages are visited: each action's time is fixed by its stage's
  // previous action and, for a receive, the time of the matching send.
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < n; ++s) {
      for (bool blocked = false; !blocked && st[s].next < lists[s].size();) {
        if (auto err = step(s, blocked)) {
          r.error = *err;
          return r;
        }
        progress |= !blocked;
      }
    }
  }

  // Deadlock: follow who waits for whom from the first blocked stage to the cause, a stage waiting for a
  // send its peer's list does not hold, or a cycle of stages each waiting before its own send.
  std::vector<bool> seen(n);
  for (int first = 0; first < n; ++first) {
    if (st[first].next == lists[first].size()) continue;
    for (int s = first;;) {
      seen[s] = true;
      const Action& a = lists[s][st[s].next];
      const int pv = peer_of(a.kind, vstage(s, a)), peer = pv % n;
      const Action wanted{a.kind == ActionKind::recv_forward ? ActionKind::send_forward : ActionKind::send_backward,
                          a.micro, pv / n};
      const auto& pl = lists[peer];
      const auto later = std::find(pl.begin() + static_cast<long>(st[peer].next), pl.end(), wanted);
      if (later != pl.end() && !seen[peer]) {
        s = peer;
        continue;
      }
      r.error = "deadlock: " + where(s, st[s].next, a) + " waits for " + to_string(wanted) + " from stage " +
                std::to_string(peer) + ", which stage " + std::to_string(peer) +
                (later == pl.end() ? " never sends"
                                   : " would send at action " + std::to_string(later - pl.begin()) +
                                         " but is blocked at " + where(peer, st[peer].next, pl[st[peer].next]));
      return r;
    }
  }
  if (!in_transit.empty()) {
    const auto& [key, msg] = *in_transit.begin();
    const auto [fwd, dst, m] = key;
    const int src = (fwd ? dst - 1 : dst + 1) % n;
    r.error = where(src, static_cast<size_t>(msg.sender_action), lists[src][msg.sender_action]) +
              ": never received by stage " + std::to_string(dst % n);
    return r;
  }

  for (const StageState& s : st) r.makespan = std::max(r.makespan, s.clock);
  for (const StageState& s : st) {
    r.idle.push_back(r.makespan - s.busy);
    r.peak_in_flight.push_back(s.peak);
  }
  r.ok = true;
  return r;
}

}  // namespace mpcomm::parallel
