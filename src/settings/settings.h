// Every environment knob mpcomm reads is declared once here (NCCL_PARAM's idea), with its default and
// a line of documentation that `mpcomm info` prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpcomm {

struct Options;
class Store;

struct ParamInfo {
  const char* name;
  const char* def;  // default, as text ("" = unset)
  const char* doc;
};

// All knobs, in the order the README lists them.
const std::vector<ParamInfo>& all_params();

// Value of a declared knob: the environment if set, else its default. Throws InvalidArgument if the
// name is not declared or the value is not a number. For knobs of the whole process (logging, traces).
std::string param_string(const char* name);
int64_t param_int(const char* name);
double param_double(const char* name);

// The same for one communicator: its Options::params first, then the environment, then the default.
// Backends read their knobs this way, once, when the communicator is created.
std::string param_string(const Options& opts, const char* name);
int64_t param_int(const Options& opts, const char* name);
double param_double(const Options& opts, const char* name);
// Throws InvalidArgument naming the first of opts.params that is not a declared knob.
void check_params(const Options& opts);

}  // namespace mpcomm
