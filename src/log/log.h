// Minimal leveled logging to stderr (MPCOMM_DEBUG=ERROR|WARN|INFO|TRACE).
#pragma once

#include <cstdarg>

namespace mpcomm {

enum class LogLevel { error = 0, warn = 1, info = 2, trace = 3 };

bool log_enabled(LogLevel level);
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace mpcomm

#define MPCOMM_LOG(level, ...)                                                      \
  do {                                                                              \
    if (::mpcomm::log_enabled(::mpcomm::LogLevel::level)) ::mpcomm::log(::mpcomm::LogLevel::level, __VA_ARGS__); \
  } while (0)
