// TCP links between ranks on different hosts: a full mesh of non-blocking sockets, set up through the
// store (every rank that has remote peers listens, the higher rank of a pair connects), each
// connection opened with the job token's Hello and the connecting rank.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/net.h"
#include "mpcomm/store.h"
#include "native/transport/link.h"

namespace mpcomm::native {

class TcpLink : public Link {
 public:
  TcpLink(net::Fd fd, int peer);
  size_t write_some(const void* buf, size_t n) override;
  size_t read_some(void* buf, size_t n) override;
  int poll_fd() const override { return fd_.get(); }

 private:
  net::Fd fd_;
  int peer_;
};

// Connects this rank to every rank in `remote` (ranks of other hosts). Returns peer -> link.
std::map<int, std::unique_ptr<TcpLink>> connect_tcp_mesh(Store& store, int rank, const std::vector<int>& remote,
                                                         const std::string& bind_addr, const std::string& token,
                                                         net::Deadline deadline);

}  // namespace mpcomm::native
