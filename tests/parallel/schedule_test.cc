// pipeline_schedule() for 1..5 stages and 1..8 micro-batches: every set of lists runs to completion under
// simulate(), keeps its ordering rules, holds the activations it promises and takes the known time; one
// list per kind written out by hand; and simulate() names the stage of a broken schedule.
#include "parallel/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "mpcomm/error.h"

namespace mpcomm::parallel {
namespace {

using K = ActionKind;
constexpr ScheduleKind kKinds[] = {ScheduleKind::one_f_one_b, ScheduleKind::gpipe};

std::vector<std::vector<Action>> all_stages(ScheduleKind kind, int stages, int micro) {
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < stages; ++s) lists.push_back(pipeline_schedule(kind, s, stages, micro));
  return lists;
}

// Position of the one action (kind, m) in the list; fails the test unless there is exactly one.
long position(const std::vector<Action>& list, K kind, int m) {
  const Action a{kind, m};
  EXPECT_EQ(std::count(list.begin(), list.end(), a), 1) << to_string(a) << " in " << to_string(list);
  return std::find(list.begin(), list.end(), a) - list.begin();
}

TEST(Schedule, EveryShapeRunsKeepsItsOrderAndMemoryBound) {
  for (ScheduleKind kind : kKinds)
    for (int stages = 1; stages <= 5; ++stages)
      for (int micro = 1; micro <= 8; ++micro) {
        SCOPED_TRACE(std::string(to_string(kind)) + " stages=" + std::to_string(stages) +
                     " micro=" + std::to_string(micro));
        const auto lists = all_stages(kind, stages, micro);
        const SimResult r = simulate(lists);
        ASSERT_TRUE(r.ok) << r.error;
        for (int s = 0; s < stages; ++s) {
          const auto& l = lists[s];
          const bool first = s == 0, last = s == stages - 1;
          EXPECT_EQ(l.size(), static_cast<size_t>(micro * (2 + (first ? 0 : 2) + (last ? 0 : 2))));
          long prev_f = -1, prev_b = -1;
          for (int m = 0; m < micro; ++m) {
            const long f = position(l, K::forward, m), b = position(l, K::backward, m);
            EXPECT_LT(prev_f, f);  // micro-batches in order
            EXPECT_LT(prev_b, b);
            EXPECT_LT(f, b);
            prev_f = f;
            prev_b = b;
            if (!first) {
              EXPECT_EQ(position(l, K::recv_forward, m), f - 1);
            }
            if (!last) {
              EXPECT_EQ(position(l, K::send_forward, m), f + 1);
            }
            if (!last) {
              EXPECT_EQ(position(l, K::recv_backward, m), b - 1);
            }
            if (!first) {
              EXPECT_EQ(position(l, K::send_backward, m), b + 1);
            }
          }
          const int bound = kind == ScheduleKind::gpipe ? micro : std::min(stages - s, micro);
          EXPECT_EQ(r.peak_in_flight[s], bound) << "stage " << s;
        }
      }
}

// With uniform stage costs both schedules fill and drain the pipe once, for any M: (M + S - 1)(f + b) per step, so
// the bubble is (S - 1) / (M + S - 1) on every stage. 1F1B buys its memory bound without a longer step.
TEST(Schedule, MakespanIsTheKnownFormula) {
  const SimOptions costs{1, 2};
  for (ScheduleKind kind : kKinds)
    for (int stages = 1; stages <= 5; ++stages)
      for (int micro = 1; micro <= 8; ++micro) {
        const SimResult r = simulate(all_stages(kind, stages, micro), costs);
        ASSERT_TRUE(r.ok) << r.error;
        const double expected = (micro + stages - 1) * (costs.forward_cost + costs.backward_cost);
        EXPECT_DOUBLE_EQ(r.makespan, expected) << to_string(kind) << " S=" << stages << " M=" << micro;
        EXPECT_DOUBLE_EQ(r.bubble_fraction(), (stages - 1.0) / (micro + stages - 1.0));
      }
}

// Written from the definition for 4 stages and 6 micro-batches.
TEST(Schedule, HandWrittenLists) {
  // 1F1B stage 0: 3 warm-up forwards, 3 forward+backward pairs, 3 cool-down backwards.
  EXPECT_EQ(to_string(pipeline_schedule(ScheduleKind::one_f_one_b, 0, 4, 6)),
            "F0 SF0 F1 SF1 F2 SF2 "
            "F3 SF3 RB0 B0 F4 SF4 RB1 B1 F5 SF5 RB2 B2 "
            "RB3 B3 RB4 B4 RB5 B5");
  // 1F1B last stage: no warm-up; each backward follows its forward and starts from the loss.
  EXPECT_EQ(to_string(pipeline_schedule(ScheduleKind::one_f_one_b, 3, 4, 6)),
            "RF0 F0 B0 SB0 RF1 F1 B1 SB1 RF2 F2 B2 SB2 RF3 F3 B3 SB3 RF4 F4 B4 SB4 RF5 F5 B5 SB5");
  EXPECT_EQ(to_string(pipeline_schedule(ScheduleKind::gpipe, 0, 4, 6)),
            "F0 SF0 F1 SF1 F2 SF2 F3 SF3 F4 SF4 F5 SF5 RB0 B0 RB1 B1 RB2 B2 RB3 B3 RB4 B4 RB5 B5");
  EXPECT_EQ(to_string(pipeline_schedule(ScheduleKind::gpipe, 3, 4, 6)),
            "RF0 F0 RF1 F1 RF2 F2 RF3 F3 RF4 F4 RF5 F5 B0 SB0 B1 SB1 B2 SB2 B3 SB3 B4 SB4 B5 SB5");
  // Fewer micro-batches than warm-up slots: all forwards, then all backwards.
  EXPECT_EQ(to_string(pipeline_schedule(ScheduleKind::one_f_one_b, 0, 4, 2)), "F0 SF0 F1 SF1 RB0 B0 RB1 B1");
}

TEST(Schedule, NamesAndArguments) {
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::gpipe);
  for (ScheduleKind k : kKinds) EXPECT_EQ(parse_schedule(to_string(k)), k);
  EXPECT_THROW(parse_schedule("1F1B"), InvalidArgument);
  EXPECT_THROW(parse_schedule(""), InvalidArgument);
  EXPECT_THROW(pipeline_schedule(ScheduleKind::gpipe, 0, 0, 1), InvalidArgument);
  EXPECT_THROW(pipeline_schedule(ScheduleKind::gpipe, 2, 2, 1), InvalidArgument);
  EXPECT_THROW(pipeline_schedule(ScheduleKind::gpipe, -1, 2, 1), InvalidArgument);
  EXPECT_THROW(pipeline_schedule(ScheduleKind::one_f_one_b, 0, 2, 0), InvalidArgument);
}

// --- simulate() on broken schedules: each error names the stage and the action ---

std::string error_of(const std::vector<std::vector<Action>>& lists) {
  const SimResult r = simulate(lists);
  EXPECT_FALSE(r.ok);
  return r.error;
}

TEST(Simulate, SwappedReceivesDeadlock) {
  // Stage 1 of 3 waits for the gradient of micro-batch 0 before receiving (and so before sending on) its
  // activation: stage 2 can never produce that gradient.
  auto lists = all_stages(ScheduleKind::one_f_one_b, 3, 2);
  auto& l = lists[1];
  std::iter_swap(std::find(l.begin(), l.end(), Action{K::recv_forward, 0}),
                 std::find(l.begin(), l.end(), Action{K::recv_backward, 0}));
  const std::string e = error_of(lists);
  // Stage 0 waits on stage 1, which waits on stage 2, which waits on stage 1: the cycle is reported.
  EXPECT_EQ(error_of(lists),
            "deadlock: stage 2, action 0 (RF0) waits for SF0 from stage 1, which stage 1 would send at action 2 "
            "but is blocked at stage 1, action 0 (RB0)");
}

TEST(Simulate, MissingSendDeadlocks) {
  auto lists = all_stages(ScheduleKind::gpipe, 3, 4);
  std::erase(lists[2], Action{K::send_backward, 1});
  // Stage 0 waits on stage 1, which waits for what stage 2 will never send: the cause is reported.
  EXPECT_EQ(error_of(lists),
            "deadlock: stage 1, action 15 (RB1) waits for SB1 from stage 2, which stage 2 never sends");
}

TEST(Simulate, UnreceivedSendAndBrokenDependencies) {
  auto lists = all_stages(ScheduleKind::one_f_one_b, 2, 2);
  lists[0].push_back({K::send_forward, 1});  // a second copy of activations nobody receives
  EXPECT_NE(error_of(lists).find("stage 0, action 8 (SF1): never received by stage 1"), std::string::npos);

  lists = all_stages(ScheduleKind::one_f_one_b, 2, 2);
  std::erase(lists[1], Action{K::recv_forward, 1});  // forward without its input; SF1 is left over
  EXPECT_NE(error_of(lists).find("stage 1, action 4 (F1): forward before its recv_forward"), std::string::npos);

  lists = all_stages(ScheduleKind::gpipe, 1, 2);  // one stage: F0 F1 B0 B1
  std::swap(lists[0][0], lists[0][2]);
  EXPECT_NE(error_of(lists).find("stage 0, action 0 (B0): backward before forward"), std::string::npos);

  lists = {{{K::forward, 0}, {K::send_forward, 0}, {K::backward, 0}}};  // one stage has nowhere to send
  EXPECT_NE(error_of(lists).find("stage 0, action 1 (SF0): no stage 1"), std::string::npos);
}

}  // namespace
}  // namespace mpcomm::parallel

namespace mpcomm::parallel {
namespace {

// Interleaved 1F1B: for 1..4 ranks, 1..3 chunks each and M = S, 2S, 3S micro-batches, every rank runs each
// (micro-batch, chunk) forward and backward once, in micro-batch order per chunk, the lists complete under
// simulate() over virtual stages, and with a chunk costing 1/V of a stage the makespan is the theory's
// M(f+b) + (S-1)(f+b)/V: the bubble is 1/V of 1F1B's.
TEST(Interleaved, EveryShapeRunsAndTheBubbleShrinksByV) {
  for (int S = 1; S <= 4; ++S)
    for (int V = 1; V <= 3; ++V)
      for (int M = S; M <= 3 * S; M += S) {
        SCOPED_TRACE("S=" + std::to_string(S) + " V=" + std::to_string(V) + " M=" + std::to_string(M));
        std::vector<std::vector<Action>> lists;
        for (int s = 0; s < S; ++s) lists.push_back(pipeline_schedule(ScheduleKind::interleaved, s, S, M, V));
        const SimResult r = simulate(lists, {1.0 / V, 2.0 / V}, V);
        ASSERT_TRUE(r.ok) << r.error;
        for (int s = 0; s < S; ++s) {
          for (int c = 0; c < V; ++c) {
            long prev_f = -1, prev_b = -1;
            for (int m = 0; m < M; ++m) {
              const Action f{ActionKind::forward, m, c}, b{ActionKind::backward, m, c};
              const auto& l = lists[static_cast<size_t>(s)];
              ASSERT_EQ(std::count(l.begin(), l.end(), f), 1) << to_string(f);
              ASSERT_EQ(std::count(l.begin(), l.end(), b), 1) << to_string(b);
              const long pf = std::find(l.begin(), l.end(), f) - l.begin(), pb = std::find(l.begin(), l.end(), b) - l.begin();
              EXPECT_LT(prev_f, pf);
              EXPECT_LT(prev_b, pb);
              EXPECT_LT(pf, pb);
              prev_f = pf, prev_b = pb;
            }
          }
        }
        EXPECT_NEAR(r.makespan, 3.0 * M + 3.0 * (S - 1) / V, 1e-9);
      }
}

TEST(Interleaved, ListsAndArguments) {
  // 2 ranks, 2 chunks, 2 micro-batches: rank 0 holds virtual stages 0 and 2, rank 1 stages 1 and 3.
  EXPECT_EQ(to_string(pipeline_schedule(ScheduleKind::interleaved, 0, 2, 2, 2)),
            "F0 SF0 F1 SF1 RF0@1 F0@1 SF0@1 RF1@1 F1@1 SF1@1 RB0@1 B0@1 SB0@1 RB1@1 B1@1 SB1@1 RB0 B0 RB1 B1");
  EXPECT_EQ(parse_schedule("interleaved"), ScheduleKind::interleaved);
  EXPECT_EQ(to_string(ScheduleKind::interleaved), "interleaved");
  try {
    pipeline_schedule(ScheduleKind::interleaved, 0, 2, 3, 2);
    ADD_FAILURE() << "3 micro-batches over 2 stages";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--micro-batches 3 is not a multiple of the 2 pipeline stages"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline_schedule(ScheduleKind::interleaved, 0, 2, 2, 0), InvalidArgument);
  // A chunk out of range is named.
  std::vector<std::vector<Action>> bad = {{{ActionKind::forward, 0, 5}}};
  EXPECT_NE(simulate(bad, {}, 2).error.find("chunk 5 out of range"), std::string::npos);
}

}  // namespace
}  // namespace mpcomm::parallel
