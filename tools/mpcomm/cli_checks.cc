// Command-line range checks and the flag > environment > default rule (cli_checks.h).
#include "cli_checks.h"

#include <cmath>
#include <cstdlib>

#include "mpcomm/error.h"
#include "settings/settings.h"

namespace mpcomm::cli {

namespace {

bool whole(const std::string& s, long long* v) {
  char* end = nullptr;
  *v = std::strtoll(s.c_str(), &end, 10);
  return !s.empty() && end != s.c_str() && *end == '\0';
}

bool number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end != s.c_str() && *end == '\0' && std::isfinite(*v);
}

CLI::Validator whole_check(long long lo, long long hi, bool bounded) {
  const std::string want = bounded ? "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi)
                                   : "a whole number of at least " + std::to_string(lo);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        long long v = 0;
        if (!whole(s, &v) || v < lo || (bounded && v > hi)) return "must be " + want + ", got '" + s + "'";
        return "";
      },
      want);
}

const ParamInfo& setting(const char* name) {
  for (const auto& p : all_params())
    if (std::string_view(p.name) == name) return p;
  throw Internal(std::string("mpcomm: no setting ") + name);
}

// The environment's value of `name` ("" when unset), checked.
std::string checked_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return "";
  if (const std::string why = value_problem(setting(name), v); !why.empty())
    throw InvalidArgument(std::string("mpcomm: ") + name + "='" + v + "' (environment): " + why);
  return v;
}

}  // namespace

CLI::Validator whole_at_least(long long lo) { return whole_check(lo, 0, false); }
CLI::Validator whole_between(long long lo, long long hi) { return whole_check(lo, hi, true); }

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        return number(s, &v) && v > 0 ? "" : "must be a number above 0, got '" + s + "'";
      },
      "a number above 0");
}

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        return number(s, &v) && v >= 0 ? "" : "must be a number of at least 0, got '" + s + "'";
      },
      "a number of at least 0");
}

double setting_or(const CLI::Option* flag, double given, const char* name, double fallback) {
  if (flag->count() > 0) return given;
  const std::string env = checked_env(name);
  return env.empty() ? fallback : std::strtod(env.c_str(), nullptr);
}

std::string setting_or(const CLI::Option* flag, const std::string& given, const char* name, const std::string& fallback) {
  if (flag->count() > 0) return given;
  const std::string env = checked_env(name);
  return env.empty() ? fallback : env;
}

}  // namespace mpcomm::cli
