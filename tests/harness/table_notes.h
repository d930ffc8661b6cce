// Reading what a measured selection table row says about its candidates (tests of mpcomm tune).
#pragma once

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "tuning/selection_table.h"

namespace mpcomm::testing {

// The value of note `key` of a row ("" when absent): note(row, "us"), note(row, "at").
inline std::string note(const tuning::Row& r, const std::string& key) {
  std::istringstream words(r.notes);
  for (std::string w; words >> w;)
    if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
  return "";
}

// "flat:1.20,ring:3.4" -> {flat: 1.2, ring: 3.4}
inline std::map<std::string, double> times(const std::string& us) {
  std::map<std::string, double> out;
  std::istringstream items(us);
  for (std::string item; std::getline(items, item, ',');) {
    const size_t colon = item.find(':');
    out[item.substr(0, colon)] = std::atof(item.c_str() + colon + 1);
  }
  return out;
}

}  // namespace mpcomm::testing
