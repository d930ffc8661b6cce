// Receives from any source (Communicator::recv with kAnySource), checked on every backend: rank 0 takes
// messages from every other rank in whatever order they come and must get each one whole, from the rank
// that sent it; tags keep messages apart. With `native_order`, also the matching rules the native engine
// promises beyond MPI's (receives posted first match first, from-any and from-one alike; of the messages
// that came before the receive, the earliest). Used by the conformance suite (ranks as threads) and the
// mpi backend's process tests.
#pragma once

#include <string>

#include "mpcomm/communicator.h"

namespace mpcomm::check {

// Every rank of comm calls it (at least 2 ranks; 3 for the ordering part). Returns "" when this rank saw
// everything right, else what went wrong first.
std::string any_source_check(Communicator& comm, bool native_order);

}  // namespace mpcomm::check
