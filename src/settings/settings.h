// Every environment setting mpcomm reads is declared once here (NCCL_PARAM's idea), with its default, a
// line of documentation that `mpcomm info` prints, and the values it takes. One precedence everywhere: a
// command-line flag (where a tool has one), then the communicator's Options::params, then the
// environment, then the default.
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
  // The values it takes: any text; 0 or 1; a whole number or a number in [lo, hi]; one of `choices`
  // ("a|b|c", any case); a device (cpu, cuda, cuda:N). An empty value is the default where that is "".
  enum class Kind : uint8_t { text, flag, integer, number, choice, device };
  Kind kind = Kind::text;
  double lo = 0, hi = 0;
  const char* choices = "";
};

// All knobs, in the order the README lists them.
const std::vector<ParamInfo>& all_params();

// Value of a declared setting: the environment if set, else its default. Throws InvalidArgument if the
// name is not declared or the value is not a number. For settings of the whole process (logging, traces).
std::string param_string(const char* name);
int64_t param_int(const char* name);
double param_double(const char* name);

// The same for one communicator: its Options::params first, then the environment, then the default.
// Backends read their settings this way, once, when the communicator is created.
std::string param_string(const Options& opts, const char* name);
int64_t param_int(const Options& opts, const char* name);
double param_double(const Options& opts, const char* name);
// What is wrong with `value` for `p` ("" when nothing is): "expected a whole number from 1 to 64".
std::string value_problem(const ParamInfo& p, const std::string& value);
// At a communicator's creation: throws InvalidArgument naming a name in opts.params that is not a
// setting, or every setting whose value (from opts.params or the environment) it does not take, with the
// value and what is allowed — whether or not this run uses it; then warn_unknown_settings().
void check_params(const Options& opts);
// The MPCOMM_* names in the environment that are not settings ("MPCOMM_TIMEOUTT (did you mean
// MPCOMM_TIMEOUT?)"); MPCOMM_TEST_* belong to mpcomm's own tests and are left out.
std::vector<std::string> unknown_settings();
// Logs a warning for each of them, once per process.
void warn_unknown_settings();

}  // namespace mpcomm
