// The native backend's fixed numbers that decide what it does (sizes from which a message waits in its
// link, pieces, limits of the shared areas, waits): what `mpcomm info` lists under "native constants".
// Every choice that depends on the call, the machine or a measurement is a row of the selection table
// instead (selection/selection.h).
#pragma once

#include <string>
#include <vector>

namespace mpcomm::native {

struct NamedConstant {
  std::string name;
  std::string value;  // with its unit: "4 KiB", "200 ms"
  std::string doc;
};
const std::vector<NamedConstant>& constants();

}  // namespace mpcomm::native
