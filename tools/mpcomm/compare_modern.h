// mpcomm compare's experiment 5 and its report section (compare_modern.cc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench.h"

namespace mpcomm::cli {

struct ModernShape {
  size_t act = 0;       // one [seq, micro-batch, hidden] activation, bytes in the model's dtype
  size_t bucket = 0;    // a data-parallel gradient bucket, bytes
  size_t hidden = 0;    // the model's hidden size
  size_t model_es = 2;  // bytes per element of the model's dtype
  int experts = 8, top_k = 2;
  // A rank's routed tokens: seq × micro-batch × top-k tokens of `hidden` elements.
  size_t moe_bytes() const { return act * static_cast<size_t>(top_k); }
  // The bench measures in float: a token of `hidden` model elements is this many floats.
  size_t token_elems_float() const { return hidden * model_es / 4; }
};

bench::Config modern_experiment(const bench::Config& base, const ModernShape& s);
std::string modern_section(const std::vector<bench::Row>& rows, const ModernShape& s, int ranks);

}  // namespace mpcomm::cli
