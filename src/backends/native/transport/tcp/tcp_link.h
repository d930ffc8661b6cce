// TCP links between ranks on different hosts: a full mesh of non-blocking sockets, set up through the
// store (every rank that has remote peers listens, the higher rank of a pair connects), each
// connection opened with the job's handshake (net/handshake.h: both ends prove the secret, the client
// names its rank), then with MPCOMM_TLS=1 put under TLS (net/tls.h), then told which stream of the pair
// it is.
//
// A link is one ordered byte stream carried by several TCP connections (MPCOMM_TCP_STREAMS): byte p of
// the stream travels on connection (p / kStripe) % streams. One TCP flow rarely fills a fast link (its
// window, one receive queue, one core for its softirq); several do, as iperf3 -P and NCCL's
// NCCL_NSOCKS_PERTHREAD show. The writer sends on every connection that has room, ahead of the
// first unsent byte within the bytes it was handed (the engine hands the rest of the same buffer
// until all of it is taken, so bytes sent ahead are the bytes it hands again); the reader reads the
// connection that holds its next byte only (it may be handed another buffer for the bytes after).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/native/transport/link.h"
#include "mpcomm/store.h"
#include "net/socket.h"
#include "net/tls.h"

namespace mpcomm::native {

class TcpLink : public Link {
 public:
  static constexpr size_t kStripe = 256 << 10;  // bytes of the stream on one connection before the next

  // `tls`: one session per connection (MPCOMM_TLS=1), or none.
  TcpLink(std::vector<net::Fd> fds, int peer, std::vector<net::tls::Ssl> tls = {});
  size_t write_some(const void* buf, size_t n) override;
  size_t read_some(void* buf, size_t n) override;
  // The connection the next byte is read from, and the one the writer waits on.
  int poll_fd() const override { return fds_[(read_pos_ / kStripe) % fds_.size()].get(); }
  int poll_fd_out() const override;
  bool buffered() const override;
  // How errors name the peer: "rank 3" until told more ("rank 3 on host-b at 10.0.0.2").
  void set_name(std::string name) { name_ = std::move(name); }

 private:
  size_t send_on(size_t s, const char* p, size_t n);

  std::vector<net::Fd> fds_;
  std::vector<net::tls::Ssl> tls_;  // destroyed before fds_
  std::string name_;
  std::vector<uint64_t> next_out_;  // per connection: stream position of its next unsent byte
  uint64_t written_ = 0;            // every byte before this is sent
  uint64_t read_pos_ = 0;           // every byte before this is read
};

// Connects this rank to every rank in `remote` (ranks of other hosts), `streams` connections each
// (the connecting rank's count is the pair's), under TLS when `tls`. Returns peer -> link.
std::map<int, std::unique_ptr<TcpLink>> connect_tcp_mesh(Store& store, int rank, const std::vector<int>& remote,
                                                         const std::string& bind_addr, const std::string& token,
                                                         int streams, bool tls, net::Deadline deadline);

}  // namespace mpcomm::native
