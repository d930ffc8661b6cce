// shrink(): ranks leave on purpose (exclude) or by failing; the others agree on who stays, the old
// communicator is revoked (its pending and later ops fail with Revoked), and the new one — the survivors in
// their old order — runs collectives and point-to-point like any other. Ranks are threads here; a process
// killed under `mpcomm launch --elastic` is in shrink_process_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "elastic/elastic_options.h"
#include "harness/thread_world.h"
#include "mpcomm/communicator.h"
#include "mpcomm/error.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

using testing::elastic;
using testing::ThreadWorld;

// An allreduce of (old rank + 1) over the new communicator: the sum of the survivors' old ranks + 1.
double survivors_sum(Communicator& c, int old_rank) {
  double x = old_rank + 1;
  c.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
  return x;
}

class Shrink : public ::testing::TestWithParam<std::string> {};

TEST_P(Shrink, ExcludedRanksLeaveTheOthersGoOnInTheirOrder) {
  ThreadWorld w(GetParam(), 4, elastic(30));
  w.run([&](int rank, Communicator& comm) {
    std::unique_ptr<Communicator> c = comm.shrink({1});
    if (rank == 1) {
      EXPECT_EQ(c, nullptr);
      return;
    }
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 3);
    EXPECT_EQ(c->rank(), rank == 0 ? 0 : rank - 1);
    EXPECT_EQ(survivors_sum(*c, rank), 1 + 3 + 4);
    // point to point in the new numbering: a ring shift
    int got = -1, mine = rank;
    Request r = c->irecv(&got, 1, DataType::int32, (c->rank() + 2) % 3);
    c->send(&mine, 1, DataType::int32, (c->rank() + 1) % 3);
    r.wait();
    const int from_old[] = {0, 2, 3};
    EXPECT_EQ(got, from_old[(c->rank() + 2) % 3]);
    // the old communicator is revoked
    double x = 1;
    EXPECT_THROW(comm.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum), Revoked);
    // and the new one shrinks again
    std::unique_ptr<Communicator> d = c->shrink({0});
    if (c->rank() == 0) {
      EXPECT_EQ(d, nullptr);
      return;
    }
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->size(), 2);
    EXPECT_EQ(survivors_sum(*d, rank), 3 + 4);
  });
}

TEST_P(Shrink, AfterAFailureTheSurvivorsAgreeWithoutTheLostRank) {
  // rank 3 aborts its communicator and leaves (a thread cannot be killed; in one process it is not known
  // gone, so the survivors wait out the timeout for it)
  ThreadWorld w(GetParam(), 4, elastic(2));
  w.run([&](int rank, Communicator& comm) {
    if (rank == 3) {
      comm.abort("rank 3 is lost");
      return;
    }
    double x = 1;
    EXPECT_ANY_THROW({
      for (int i = 0; i < 100; ++i) comm.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
    });
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Communicator> c = comm.shrink();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 3);
    EXPECT_EQ(c->rank(), rank);
    EXPECT_EQ(survivors_sum(*c, rank), 1 + 2 + 3);
    EXPECT_LT(took, 10.0);  // bounded by the timeout (2 s) and the new communicator's setup
  });
}

TEST_P(Shrink, SplitChildrenAreRevokedWithTheirParentAndShrinkTheSameWay) {
  ThreadWorld w(GetParam(), 4, elastic(30));
  w.run([&](int rank, Communicator& comm) {
    std::unique_ptr<Communicator> half = comm.split(rank % 2, rank);  // {0, 2} and {1, 3}
    comm.barrier();  // every rank's split is done before rank 3 drops its half
    std::unique_ptr<Communicator> rest = comm.shrink({3});
    double x = 1;
    EXPECT_THROW(half->allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum), Revoked);
    // {0, 2} shrinks as it was (nothing excluded: it was revoked, not failed); {1, 3} without old rank 3
    std::unique_ptr<Communicator> h = half->shrink(rank % 2 == 0 ? std::vector<int>{} : std::vector<int>{1});
    if (rank == 3) {
      EXPECT_EQ(h, nullptr);
      return;
    }
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->size(), rank % 2 == 0 ? 2 : 1);
    EXPECT_EQ(survivors_sum(*h, rank), rank % 2 == 0 ? 1 + 3 : 2);
    EXPECT_THROW(half->shrink({}), InvalidArgument);  // replaced already
  });
}

TEST_P(Shrink, AFailedChildDroppedBeforeTheShrinkStillLetsItsParentShrink) {
  // rank 3 aborts the child {1, 3} and leaves; rank 1 sees the failure there, drops that child and shrinks the
  // parent at once (no op of its own failed on the parent); ranks 0 and 2 learn of it on the parent (told by
  // rank 1's revoke)
  ThreadWorld w(GetParam(), 4, elastic(2));
  w.run([&](int rank, Communicator& comm) {
    std::unique_ptr<Communicator> half = comm.split(rank % 2, rank);
    comm.barrier();  // every rank's split is done (gloo's setup still connects when the split returns elsewhere)
    double x = 1;
    if (rank == 3) {
      half->abort("rank 3 is lost");
      return;
    }
    if (rank == 1) {
      EXPECT_ANY_THROW(half->allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum));
      half.reset();
    } else {
      EXPECT_ANY_THROW({
        for (int i = 0; i < 100; ++i) comm.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
      });
    }
    std::unique_ptr<Communicator> c = comm.shrink();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 3);
    EXPECT_EQ(survivors_sum(*c, rank), 1 + 2 + 3);
  });
}

TEST_P(Shrink, TheShrunkCommunicatorPassesTheConformanceSuite) {
  // 5 ranks, rank 1 leaves: every op's conformance cases (dtypes, reduce ops, counts, in and out of place) on the
  // 4 that stay, over the communicator shrink() made
  ThreadWorld w(GetParam(), 5, elastic(30));
  std::vector<size_t> wrong(5, 0);
  std::vector<std::string> first(5);
  w.run([&](int rank, Communicator& comm) {
    std::unique_ptr<Communicator> c = comm.shrink({1});
    if (rank == 1) return;
    for (OpKind op : check::checked_ops())
      for (const auto& k : check::conformance_cases(op, c->size())) {
        const check::Result r = check::run_case(*c, k);
        if (r.wrong > 0 && wrong[static_cast<size_t>(rank)] == 0) first[static_cast<size_t>(rank)] = check::describe(k);
        wrong[static_cast<size_t>(rank)] += r.wrong;
      }
  });
  for (int r = 0; r < 5; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0u) << "rank " << r << ", first in " << first[r];
}

TEST_P(Shrink, PendingRequestsFailWithRevoked) {
  ThreadWorld w(GetParam(), 2, elastic(30));
  w.run([&](int rank, Communicator& comm) {
    int v = 0;
    Request pending;
    if (rank == 0) pending = comm.irecv(&v, 1, DataType::int32, 1, /*tag=*/7);  // rank 1 never sends it
    std::unique_ptr<Communicator> c = comm.shrink({1});
    if (rank == 1) return;
    EXPECT_THROW(pending.wait(), Revoked);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 1);
  });
}

TEST_P(Shrink, BadCallsAreRefused) {
  ThreadWorld w(GetParam(), 2, elastic(30));
  w.run([&](int, Communicator& comm) {
    EXPECT_THROW(comm.shrink(), InvalidArgument);  // healthy: nothing to shrink without exclude
    EXPECT_THROW(comm.shrink({2}), InvalidArgument);
    EXPECT_THROW(comm.shrink({0, 0}), InvalidArgument);
    EXPECT_THROW(comm.shrink({0, 1}), InvalidArgument);
    double x = 1;  // refusals leave the communicator working
    comm.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
    EXPECT_EQ(x, 2);
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, Shrink, ::testing::Values("native", "gloo"),
                         [](const auto& info) { return info.param; });

TEST(ShrinkRefused, AfterAFailureWithoutElasticTheJobIsEnding) {
  Options o;
  o.timeout = Millis(2000);
  ThreadWorld w("native", 2, o);
  w.run([&](int rank, Communicator& comm) {
    if (rank == 1) {
      comm.abort("lost");
      return;
    }
    double x = 1;
    EXPECT_ANY_THROW(comm.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum));
    try {
      comm.shrink();
      ADD_FAILURE() << "shrink() after a job-wide failure";
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("MPCOMM_ELASTIC"), std::string::npos) << e.what();
    }
  });
}

TEST(ShrinkRefused, AutoSaysWhy) {
  ThreadWorld w("auto", 2, elastic(30));
  w.run([&](int, Communicator& comm) { EXPECT_THROW(comm.shrink({1}), Unsupported); });
}

}  // namespace
}  // namespace mpcomm
