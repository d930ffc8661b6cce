// The address a communicator's listeners bind to and advertise to the other ranks, when
// Options::bind_addr is empty: MPCOMM_ADDR; else the first address of the interfaces MPCOMM_IFNAME
// selects; else the local address that routes to the store's server (Store::server_host) or, without
// one, to MASTER_ADDR, when that host is not this machine's loopback; else 127.0.0.1. Backends get it
// through create() (backends/registry.cc), which has the store.
#pragma once

#include <string>

#include "mpcomm/communicator.h"
#include "mpcomm/store.h"

namespace mpcomm {

std::string choose_bind_address(const Options& opts, const Store* store);

}  // namespace mpcomm
