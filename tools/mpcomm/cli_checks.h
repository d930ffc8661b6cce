// Range checks for command-line options that say in words what is allowed: "--ranks: must be a whole
// number of at least 1, got 0" (CLI11's own would print the range of a double). And the flag > environment
// > default rule for options that set an MPCOMM_* setting of the ranks.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace mpcomm::cli {

// A whole number of at least `lo` (and at most `hi`).
CLI::Validator whole_at_least(long long lo);
CLI::Validator whole_between(long long lo, long long hi);
// A number above 0 (seconds, factors).
CLI::Validator positive_number();
// A number of at least 0.
CLI::Validator non_negative_number();

// What an option that sets the ranks' `setting` is when the command line does not give it: the
// setting's value in the environment (checked: an InvalidArgument naming it when it does not take the
// value), else `fallback`.
double setting_or(const CLI::Option* flag, double given, const char* setting, double fallback);
std::string setting_or(const CLI::Option* flag, const std::string& given, const char* setting, const std::string& fallback);

}  // namespace mpcomm::cli
