// The TCP link on its own (src/backends/native/transport/tcp/tcp_link.h), over socket pairs: one byte
// stream striped over several connections arrives whole and in order, whatever pieces the writer and
// the reader move at a time (the writer sends ahead on every connection with room); a peer that closes
// is a PeerFailure naming it once its bytes are read.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backends/native/transport/tcp/tcp_link.h"
#include "mpcomm/error.h"

namespace mpcomm::native {
namespace {

// Two ends of a link of `streams` connections.
std::pair<std::unique_ptr<TcpLink>, std::unique_ptr<TcpLink>> linked(int streams) {
  std::vector<net::Fd> a, b;
  for (int s = 0; s < streams; ++s) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a.emplace_back(fds[0]);
    b.emplace_back(fds[1]);
  }
  return {std::make_unique<TcpLink>(std::move(a), 1), std::make_unique<TcpLink>(std::move(b), 0)};
}

TEST(TcpLink, AStreamOverSeveralConnectionsArrivesWholeAndInOrder) {
  for (int streams : {1, 3}) {
    auto [writer, reader] = linked(streams);
    // A few stripes and a ragged end, in pieces of every size.
    const size_t total = 3 * TcpLink::kStripe * static_cast<size_t>(streams) + 12345;
    std::vector<uint8_t> src(total), dst(total, 0);
    for (size_t i = 0; i < total; ++i) src[i] = static_cast<uint8_t>(i * 13 + (i >> 16));
    std::mt19937 rng(7 + streams);
    size_t sent = 0, got = 0;
    for (int pass = 0; pass < 1000000 && got < total; ++pass) {
      // The writer is handed everything it has not taken yet (as the engine does).
      if (sent < total) sent += writer->write_some(src.data() + sent, total - sent);
      // The reader asks for pieces of any size, from 1 byte to 1 MiB.
      const size_t want = std::min<size_t>(total - got, 1 + rng() % (1 << 20));
      got += reader->read_some(dst.data() + got, want);
    }
    ASSERT_EQ(got, total) << streams << " streams";
    const auto bad = std::mismatch(src.begin(), src.end(), dst.begin());
    EXPECT_EQ(bad.first, src.end()) << streams << " streams: byte " << (bad.first - src.begin()) << " differs";
  }
}

TEST(TcpLink, APeerThatClosesIsAPeerFailureOnceItsBytesAreRead) {
  auto [writer, reader] = linked(2);
  reader->set_name("rank 5 on host-b at 10.0.0.2");
  const std::string msg = "last words";
  ASSERT_EQ(writer->write_some(msg.data(), msg.size()), msg.size());
  writer.reset();  // closes its connections
  std::string got(msg.size(), '\0');
  EXPECT_EQ(reader->read_some(got.data(), got.size()), msg.size());
  EXPECT_EQ(got, msg);
  try {
    char c;
    reader->read_some(&c, 1);
    FAIL() << "no error after the peer closed";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5 on host-b at 10.0.0.2 closed its connection"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpcomm::native
