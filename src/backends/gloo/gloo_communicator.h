// The gloo backend: Debian's libgloo (TCP transport) behind the Communicator API, bootstrapped
// through mpcomm's Store. Gloo's own algorithm where it has one; composed where it has none (the
// README's capability table says which).
#pragma once

#include <memory>

#include "core/backend.h"

namespace mpcomm::gloo_backend {

std::unique_ptr<detail::Backend> create_gloo(std::shared_ptr<Store> store, int rank, int size, const Options& opts);

}  // namespace mpcomm::gloo_backend

namespace mpcomm::gloo {
using gloo_backend::create_gloo;
}  // namespace mpcomm::gloo
