#include "core/wait.h"

#include <cstdio>

namespace mpcomm {

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  return buf;
}

}  // namespace mpcomm
