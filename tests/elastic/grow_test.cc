// grow() and join(): processes (threads here) that join a running job take the next ranks of a new
// communicator; the old one stays usable; a grow whose joiners do not come times out on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "elastic/elastic_options.h"
#include "harness/thread_world.h"
#include "mpcomm/communicator.h"
#include "mpcomm/error.h"

namespace mpcomm {
namespace {

using testing::elastic;
using testing::ThreadWorld;

class Grow : public ::testing::TestWithParam<std::string> {};

TEST_P(Grow, JoinersTakeTheNextRanks) {
  ThreadWorld w(GetParam(), 3, elastic(30));
  std::vector<int> joined(2, -1);
  std::vector<double> joiner_sum(2, 0);
  std::vector<std::thread> joiners;
  for (int j = 0; j < 2; ++j)
    joiners.emplace_back([&, j] {
      std::unique_ptr<Communicator> c = join(w.store(), elastic(30));
      joined[static_cast<size_t>(j)] = c->rank();
      double x = c->rank() + 1;
      c->allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
      joiner_sum[static_cast<size_t>(j)] = x;
    });
  w.run([&](int rank, Communicator& comm) {
    std::unique_ptr<Communicator> c = comm.grow(2);
    EXPECT_EQ(c->size(), 5);
    EXPECT_EQ(c->rank(), rank);
    double x = c->rank() + 1;
    c->allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
    EXPECT_EQ(x, 15);
    double y = 1;  // the old communicator is as it was
    comm.allreduce(&y, &y, 1, DataType::float64, ReduceOp::sum);
    EXPECT_EQ(y, 3);
  });
  for (auto& t : joiners) t.join();
  std::sort(joined.begin(), joined.end());
  EXPECT_EQ(joined, (std::vector<int>{3, 4}));
  EXPECT_EQ(joiner_sum, (std::vector<double>{15, 15}));
}

TEST_P(Grow, AfterAShrinkTheJobGrowsBack) {
  ThreadWorld w(GetParam(), 4, elastic(30));
  std::thread joiner([&] {
    std::unique_ptr<Communicator> c = join(w.store(), elastic(30));
    EXPECT_EQ(c->rank(), 3);
    double x = 10;
    c->allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
    EXPECT_EQ(x, 1 + 2 + 3 + 10);
  });
  w.run([&](int rank, Communicator& comm) {
    std::unique_ptr<Communicator> s = comm.shrink({2});
    if (rank == 2) return;
    std::unique_ptr<Communicator> c = s->grow(1);
    double x = s->rank() + 1;
    c->allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
    EXPECT_EQ(x, 1 + 2 + 3 + 10);
  });
  joiner.join();
}

TEST_P(Grow, JoinersThatDoNotComeTimeOutEverywhere) {
  ThreadWorld w(GetParam(), 2, elastic(1));
  w.run([&](int, Communicator& comm) {
    EXPECT_THROW(comm.grow(1), Timeout);
    EXPECT_THROW(comm.grow(0), InvalidArgument);
  });
}

TEST_P(Grow, WaitingJoinersAreCountedAndClosingTheJoinsSendsThemAway) {
  ThreadWorld w(GetParam(), 2, elastic(30));
  std::unique_ptr<Communicator> got;
  bool returned = false;
  std::thread joiner([&] {
    got = join(w.store(), elastic(30));  // waits: nobody grows
    returned = true;
  });
  w.run([&](int rank, Communicator& comm) {
    if (rank == 0) {  // the joiner is counted once it is in the queue
      for (int i = 0; i < 2000 && waiting_joiners(comm) < 1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(waiting_joiners(comm), 1);
      close_joins(comm);
    }
  });
  joiner.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(got, nullptr) << "a closed job seats nobody";
  EXPECT_EQ(join(w.store(), elastic(30)), nullptr) << "nor a joiner that comes later";
}

INSTANTIATE_TEST_SUITE_P(Backends, Grow, ::testing::Values("native", "gloo"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mpcomm
