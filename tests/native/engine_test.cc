// The native engine's parts on their own (src/backends/native/engine/), without a communicator: two
// engines of one process, one thread driving both by test() in turns, over an in-memory link (matching,
// unexpected frames) or a real shared-memory segment (single copy, lazy frames), and the unexpected
// frames' buffers. What each asserts would fail if its part were wrong: data at the wrong place, a frame
// matched to the wrong receive, a mismatch not reported, a buffer not reused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "backends/native/engine/engine.h"
#include "backends/native/engine/unexpected.h"
#include "backends/native/transport/shm/shm_segment.h"
#include "mpcomm/error.h"

namespace mpcomm::native {
namespace {

// One direction of an in-memory byte stream, shared by its two ends.
struct Pipe {
  std::deque<char> bytes;
  bool closed = false;
};

// A Link over two pipes: writes go to `out`, reads come from `in`. `room` bounds what `out` holds, so a
// large payload moves in pieces as the reader drains it.
class MemoryLink : public Link {
 public:
  MemoryLink(std::shared_ptr<Pipe> out, std::shared_ptr<Pipe> in, size_t room) : out_(out), in_(in), room_(room) {}
  size_t write_some(const void* buf, size_t n) override {
    n = std::min(n, room_ - std::min(room_, out_->bytes.size()));
    const char* p = static_cast<const char*>(buf);
    out_->bytes.insert(out_->bytes.end(), p, p + n);
    return n;
  }
  size_t read_some(void* buf, size_t n) override {
    if (in_->bytes.empty() && in_->closed) throw PeerFailure("mpcomm: the peer closed the link");
    n = std::min(n, in_->bytes.size());
    std::copy(in_->bytes.begin(), in_->bytes.begin() + static_cast<long>(n), static_cast<char*>(buf));
    in_->bytes.erase(in_->bytes.begin(), in_->bytes.begin() + static_cast<long>(n));
    return n;
  }

 private:
  std::shared_ptr<Pipe> out_, in_;
  size_t room_;
};

// Two engines, ranks 0 and 1 of one process, joined by MemoryLinks (room: bytes a direction holds).
struct MemoryPair {
  explicit MemoryPair(size_t room = size_t{1} << 20) {
    auto a = std::make_shared<Pipe>(), b = std::make_shared<Pipe>();
    to1 = a, to0 = b;
    for (int r = 0; r < 2; ++r) {
      std::vector<std::unique_ptr<Link>> links(2);
      links[static_cast<size_t>(1 - r)] = std::make_unique<MemoryLink>(r == 0 ? a : b, r == 0 ? b : a, room);
      EngineSettings s;
      s.spin_for = std::chrono::microseconds(0);
      s.max_unexpected = uint64_t{64} << 20;
      e[r] = std::make_unique<Engine>(r, 2, std::move(links), std::vector<PeerInfo>(2), nullptr, -1, nullptr,
                                      Millis(2000), s);
    }
  }
  // Both engines make progress until every handle is done (bounded).
  void finish(const std::vector<std::pair<int, Handle>>& hs) {
    for (int pass = 0; pass < 100000; ++pass) {
      bool all = true;
      for (const auto& [r, h] : hs) all = e[r]->test(h) && all;
      if (all) return;
    }
    FAIL() << "the transfers did not finish";
  }
  std::unique_ptr<Engine> e[2];
  std::shared_ptr<Pipe> to0, to1;
};

detail::Op collective(uint64_t seq, size_t count, OpKind kind = OpKind::allreduce) {
  detail::Op op;
  op.kind = kind;
  op.seq = seq;
  op.count = count;
  op.dtype = DataType::uint8;
  op.redop = ReduceOp::sum;
  return op;
}

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed * 31 + i * 7 + (i >> 9));
  return v;
}

// ---- matching ---------------------------------------------------------------------------------------

// Collective frames from one peer match its receives in order; p2p frames by tag, FIFO within a tag,
// whatever order their receives are posted in: receives posted before the frames come (matched as each
// header arrives), and after (the frames were read and kept as unexpected).
TEST(EngineMatching, CollectiveInOrderP2PByTagFifoPerTag) {
  for (bool frames_first : {false, true}) {
    MemoryPair m;
    const detail::Op op = collective(0, 100);
    m.e[0]->begin(&op);
    m.e[1]->begin(&op);
    const auto c1 = pattern(100, 1), c2 = pattern(100, 2), t5a = pattern(64, 5), t5b = pattern(64, 6), t9 = pattern(64, 9);
    std::vector<char> r1(100), r2(100), a(64), b(64), nine(64), dummy(1);
    auto post_receives = [&] {
      return std::vector<std::pair<int, Handle>>{{1, m.e[1]->recv_p2p(0, 9, nine.data(), 64)}, {1, m.e[1]->recv(0, r1.data(), 100)},
                                                 {1, m.e[1]->recv_p2p(0, 5, a.data(), 64)}, {1, m.e[1]->recv(0, r2.data(), 100)},
                                                 {1, m.e[1]->recv_p2p(0, 5, b.data(), 64)}};
    };
    std::vector<std::pair<int, Handle>> recvs;
    if (!frames_first) recvs = post_receives();
    m.finish({{0, m.e[0]->send(1, c1.data(), 100)}, {0, m.e[0]->send(1, c2.data(), 100)},
              {0, m.e[0]->send_p2p(1, 5, t5a.data(), 64)}, {0, m.e[0]->send_p2p(1, 9, t9.data(), 64)},
              {0, m.e[0]->send_p2p(1, 5, t5b.data(), 64)}});
    if (frames_first) {
      m.e[1]->test(m.e[1]->recv_p2p(0, 99, dummy.data(), 1));  // reads every frame: all unexpected now
      EXPECT_TRUE(m.to1->bytes.empty());
      recvs = post_receives();
    }
    m.finish(recvs);
    EXPECT_EQ(r1, c1) << frames_first;
    EXPECT_EQ(r2, c2) << frames_first;
    EXPECT_EQ(a, t5a) << "tag 5's first send goes to tag 5's first receive; frames first: " << frames_first;
    EXPECT_EQ(b, t5b) << frames_first;
    EXPECT_EQ(nine, t9) << "tag 9's receive, posted first, still gets tag 9's send; frames first: " << frames_first;
  }
}

// Another call of the same sequence number (a fingerprint that differs) or another size is a Mismatch
// naming both calls, whether the frame came before or after the receive.
TEST(EngineMatching, AnotherCallOrSizeIsAMismatchNamingBoth) {
  for (bool frame_first : {true, false}) {
    MemoryPair m;
    const detail::Op mine = collective(3, 16), theirs = collective(3, 16, OpKind::broadcast);
    m.e[0]->begin(&theirs);
    m.e[1]->begin(&mine);
    const auto data = pattern(16, 3);
    std::vector<char> got(16);
    Handle r;
    if (!frame_first) r = m.e[1]->recv(0, got.data(), 16);
    m.e[0]->send(1, data.data(), 16);
    try {
      if (frame_first) {
        std::vector<char> dummy(1);
        m.e[1]->test(m.e[1]->recv_p2p(0, 99, dummy.data(), 1));  // reads the frame: kept as unexpected
        r = m.e[1]->recv(0, got.data(), 16);
      }
      for (int i = 0; i < 1000 && !m.e[1]->test(r); ++i) {
      }
      FAIL() << "no mismatch (frame first: " << frame_first << ")";
    } catch (const Mismatch& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("rank 0 called broadcast #3 (count 16, uint8)"), std::string::npos) << w;
      EXPECT_NE(w.find("this rank called allreduce #3 (count 16, uint8, sum)"), std::string::npos) << w;
    }
  }
  MemoryPair m;
  const detail::Op op = collective(0, 0, OpKind::send);
  m.e[0]->begin(&op);
  m.e[1]->begin(&op);
  const auto data = pattern(32, 4);
  std::vector<char> got(16);
  m.e[0]->send_p2p(1, 7, data.data(), 32);
  Handle r = m.e[1]->recv_p2p(0, 7, got.data(), 16);
  try {
    for (int i = 0; i < 1000 && !m.e[1]->test(r); ++i) {
    }
    FAIL() << "a 32-byte send matched a 16-byte receive";
  } catch (const Mismatch& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sent 32 bytes with tag 7 but the receive expects 16"), std::string::npos) << e.what();
  }
}

// A receive posted while its payload is arriving takes what came so far and the rest straight from the
// link; a large collective frame that comes first waits in its link (nothing buffered) until its receive.
TEST(EngineMatching, PartlyArrivedAndStalledFrames) {
  MemoryPair m(8192);  // a direction holds 8 KiB: a 100 KiB payload moves in pieces
  const detail::Op op = collective(0, 100 << 10);
  m.e[0]->begin(&op);
  m.e[1]->begin(&op);
  const auto big = pattern(100 << 10, 7);
  Handle s = m.e[0]->send(1, big.data(), big.size());
  // Rank 1 progresses without a receive: the frame stalls (not read past its header).
  std::vector<char> dummy(1);
  Handle none = m.e[1]->recv_p2p(0, 99, dummy.data(), 1);
  for (int i = 0; i < 10; ++i) m.e[1]->test(none), m.e[0]->test(s);
  EXPECT_FALSE(s->done) << "the payload waits in the link for its receive";
  EXPECT_LT(s->done_bytes, 2 * 8192u) << "the receiver read only the header: the payload is not buffered";
  std::vector<char> got(big.size());
  m.finish({{0, s}, {1, m.e[1]->recv(0, got.data(), got.size())}});
  EXPECT_EQ(got, big);
  // p2p: a frame half-arrived when its receive is posted.
  const detail::Op p2p = collective(0, 0, OpKind::send);
  m.e[0]->begin(&p2p);
  m.e[1]->begin(&p2p);
  const auto mid = pattern(20000, 8);
  Handle s2 = m.e[0]->send_p2p(1, 3, mid.data(), mid.size());
  m.e[1]->test(none);  // reads what the send's first pass wrote: the header and part of the payload
  std::vector<char> got2(mid.size());
  Handle r2 = m.e[1]->recv_p2p(0, 3, got2.data(), got2.size());
  EXPECT_GT(r2->done_bytes, 0u) << "what came so far is taken at once";
  EXPECT_LT(r2->done_bytes, mid.size());
  m.finish({{0, s2}, {1, r2}});
  EXPECT_EQ(got2, mid);
}

// ---- the unexpected frames' buffers -------------------------------------------------------------------

TEST(UnexpectedBuffers, LargeOnesAreKeptTheLargerFirstSmallOnesNot) {
  UnexpectedBuffers pool;
  auto take = [&](size_t bytes) {
    auto u = std::make_unique<Unexpected>();
    pool.take(*u, bytes);
    return u;
  };
  auto a = take(UnexpectedBuffers::kSpareFrom);
  const char* a_mem = a->data.get();
  pool.give_back(*a);
  auto b = take(UnexpectedBuffers::kSpareFrom - 10);
  EXPECT_NE(b->data.get(), a_mem) << "a small frame takes no kept buffer";
  auto c = take(UnexpectedBuffers::kSpareFrom);
  EXPECT_EQ(c->data.get(), a_mem) << "a kept buffer is reused";
  auto small = take(100);
  pool.give_back(*small);
  EXPECT_EQ(small->data, nullptr) << "small buffers are freed";
  auto big1 = take(1 << 20), big2 = take(2 << 20), big3 = take(4 << 20);
  const char* mem2 = big2->data.get();
  const char* mem3 = big3->data.get();
  pool.give_back(*big1);
  pool.give_back(*big2);
  pool.give_back(*big3);  // at most two are kept: the two larger
  EXPECT_EQ(big1->data, nullptr);
  auto again = take(3 << 20);
  EXPECT_EQ(again->data.get(), mem3) << "the smallest kept buffer that holds it";
  EXPECT_EQ(again->capacity, size_t{4} << 20);
  auto again2 = take(1 << 20);
  EXPECT_EQ(again2->data.get(), mem2);
}

// ---- single copy and lazy frames, over a real segment ---------------------------------------------------

// Two engines on one shared-memory segment, in this process (so each may read the other's memory), sends
// from `p2p_from` bytes by single copy.
struct ShmPair {
  explicit ShmPair(size_t p2p_from, size_t collective_from = SIZE_MAX) {
    const std::string name = "/mpcomm.enginetest." + std::to_string(::getpid());
    seg = ShmSegment::create(name, 2, 64 << 10);
    ShmSegment::unlink(name);
    std::vector<PeerInfo> info(2);
    for (int r = 0; r < 2; ++r) info[static_cast<size_t>(r)] = {static_cast<int>(::getpid()), true, r, ""};
    for (int r = 0; r < 2; ++r) {
      std::vector<std::unique_ptr<Link>> links(2);
      links[static_cast<size_t>(1 - r)] = std::make_unique<ShmLink>(seg.get(), r, 1 - r);
      EngineSettings s;
      s.spin_for = std::chrono::microseconds(0);
      e[r] = std::make_unique<Engine>(r, 2, std::move(links), info, seg, r, nullptr, Millis(5000), s);
      PathPolicy p;
      p.set(PathPolicy::p2p, {{p2p_from, SIZE_MAX}});
      p.set(PathPolicy::collective, {{collective_from, SIZE_MAX}});
      e[r]->set_paths(p);
    }
  }
  void finish(const std::vector<std::pair<int, Handle>>& hs) {
    for (int pass = 0; pass < 1000000; ++pass) {
      bool all = true;
      for (const auto& [r, h] : hs) all = e[r]->test(h) && all;
      if (all) return;
    }
    FAIL() << "the transfers did not finish";
  }
  std::shared_ptr<ShmSegment> seg;
  std::unique_ptr<Engine> e[2];
};

// A send by single copy: only a descriptor travels; the receiver reads the sender's buffer (here after
// the sender changed nothing: the bytes are the sender's), and the send is done only once the
// receiver's acknowledgement came. Below the policy's size, through the ring.
TEST(EngineSingleCopy, SendsFromThePolicysSizeAreReadFromTheSendersBuffer) {
  ShmPair m(64 << 10);
  const detail::Op op = collective(0, 0, OpKind::send);
  m.e[0]->begin(&op);
  m.e[1]->begin(&op);
  auto big = pattern(1 << 20, 11), small = pattern((64 << 10) - 1, 12);
  Handle s = m.e[0]->send_p2p(1, 0, big.data(), big.size());
  Handle t = m.e[0]->send_p2p(1, 1, small.data(), small.size());
  EXPECT_TRUE(s->single_copy);
  EXPECT_FALSE(t->single_copy);
  for (int i = 0; i < 100; ++i) m.e[0]->test(s);
  EXPECT_FALSE(s->done) << "a single-copy send waits for the receiver's read";
  std::vector<char> got(big.size()), got_small(small.size());
  m.finish({{1, m.e[1]->recv_p2p(0, 0, got.data(), got.size())}, {1, m.e[1]->recv_p2p(0, 1, got_small.data(), got_small.size())},
            {0, s}, {0, t}});
  EXPECT_EQ(got, big);
  EXPECT_EQ(got_small, small);
}

// A collective's messages follow the policy's collective spans, but those of Route::ring (algorithms
// whose point is the ring) never go by single copy; a reducing receive of a single-copy frame reduces the
// sender's buffer into its own.
TEST(EngineSingleCopy, CollectiveMessagesFollowThePolicyButRouteRingNever) {
  ShmPair m(SIZE_MAX, 256 << 10);
  const detail::Op op = collective(0, 1 << 20);
  m.e[0]->begin(&op);
  m.e[1]->begin(&op);
  auto big = pattern(1 << 20, 31), small = pattern((256 << 10) - 1, 32), ring = pattern(1 << 20, 33);
  Handle s1 = m.e[0]->send(1, big.data(), big.size());
  Handle s2 = m.e[0]->send(1, small.data(), small.size());
  Handle s3 = m.e[0]->send(1, ring.data(), ring.size(), Route::ring);
  EXPECT_TRUE(s1->single_copy);
  EXPECT_FALSE(s2->single_copy);
  EXPECT_FALSE(s3->single_copy);
  std::vector<char> g1(big.size()), g2(small.size()), own(ring.size(), 1), g3(ring.size());
  m.finish({{1, m.e[1]->recv(0, g1.data(), g1.size())}, {1, m.e[1]->recv(0, g2.data(), g2.size())},
            {1, m.e[1]->recv_reduce(0, g3.data(), own.data(), g3.size(), DataType::uint8, ReduceOp::sum)}, {0, s1}, {0, s2}, {0, s3}});
  EXPECT_EQ(g1, big);
  EXPECT_EQ(g2, small);
  for (size_t i = 0; i < g3.size(); ++i)
    if (g3[i] != static_cast<char>(ring[i] + 1)) FAIL() << "reduced byte " << i;
}

// A collective message by single copy that comes before its receive, however small, waits in its link
// (only a descriptor came: there is nothing to buffer) and is read straight into the receive once it is
// posted; the send is done only then.
TEST(EngineSingleCopy, ASmallCollectiveDescriptorBeforeItsReceiveWaitsForIt) {
  ShmPair m(SIZE_MAX, 0);
  const detail::Op op = collective(0, 25);
  m.e[0]->begin(&op);
  m.e[1]->begin(&op);
  const auto small = pattern(100, 41);
  Handle s = m.e[0]->send(1, small.data(), small.size());
  EXPECT_TRUE(s->single_copy);
  std::vector<char> dummy(1);
  Handle none = m.e[1]->recv_p2p(0, 99, dummy.data(), 1);
  for (int i = 0; i < 10; ++i) m.e[1]->test(none), m.e[0]->test(s);
  EXPECT_FALSE(s->done) << "the descriptor waits for its receive";
  std::vector<char> got(small.size());
  m.finish({{1, m.e[1]->recv(0, got.data(), got.size())}, {0, s}});
  EXPECT_EQ(got, small);
}

// A single-copy send whose receive is not posted stays a lazy frame: the payload is read when the
// receive comes (straight into it); one not received within kLazyLimit is read into a buffer and its
// sender released, so ranks that all send before they receive still end.
TEST(EngineSingleCopy, LazyFramesAreReadAtTheirReceiveOrAfterTheLimit) {
  ShmPair m(0);
  const detail::Op op = collective(0, 0, OpKind::send);
  m.e[0]->begin(&op);
  m.e[1]->begin(&op);
  auto first = pattern(100000, 21), second = pattern(100000, 22);
  Handle s1 = m.e[0]->send_p2p(1, 4, first.data(), first.size());
  std::vector<char> dummy(1);
  Handle other = m.e[1]->recv_p2p(0, 77, dummy.data(), 1);  // progress on rank 1 without the right receive
  for (int i = 0; i < 50; ++i) m.e[1]->test(other), m.e[0]->test(s1);
  EXPECT_FALSE(s1->done) << "held as a lazy frame: the sender's buffer is still the payload";
  std::vector<char> got1(first.size());
  m.finish({{1, m.e[1]->recv_p2p(0, 4, got1.data(), got1.size())}, {0, s1}});
  EXPECT_EQ(got1, first);

  Handle s2 = m.e[0]->send_p2p(1, 5, second.data(), second.size());
  const auto until = std::chrono::steady_clock::now() + kLazyLimit + std::chrono::milliseconds(100);
  while (!s2->done && std::chrono::steady_clock::now() < until) m.e[1]->test(other), m.e[0]->test(s2);
  EXPECT_TRUE(s2->done) << "released after the lazy limit, its receive still not posted";
  std::fill(second.begin(), second.end(), 0);  // the sender reuses its buffer: the payload was copied out
  std::vector<char> got2(second.size());
  m.finish({{1, m.e[1]->recv_p2p(0, 5, got2.data(), got2.size())}});
  EXPECT_EQ(got2, pattern(100000, 22));
}

}  // namespace
}  // namespace mpcomm::native
