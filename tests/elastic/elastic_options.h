// The options of the elastic tests' thread worlds.
#pragma once

#include "mpcomm/communicator.h"

namespace mpcomm::testing {

// Elastic (a failure ends the communicator only), with a timeout of `seconds`.
inline Options elastic(int seconds) {
  Options o;
  o.elastic = 1;
  o.timeout = Millis(seconds * 1000);
  return o;
}

}  // namespace mpcomm::testing
