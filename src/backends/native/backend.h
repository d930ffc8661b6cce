// The native backend: shared memory between ranks of one host, TCP between hosts, algorithms from
// src/native/algorithms over the engine in src/native/engine.h.
#pragma once

#include <memory>

#include "core/backend.h"

namespace mpcomm::native {

std::unique_ptr<detail::Backend> create_native(std::shared_ptr<Store> store, int rank, int size, const Options& opts);

}  // namespace mpcomm::native
