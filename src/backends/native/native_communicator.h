// The native backend: shared memory between ranks of one host, TCP between hosts, algorithms from
// src/native/algorithms over the engine in src/native/engine.h.
#pragma once

#include <memory>

#include "mpcomm/communicator.h"

namespace mpcomm::native {

std::unique_ptr<Communicator> create_native(std::shared_ptr<Store> store, int rank, int size, const Options& opts);

}  // namespace mpcomm::native
