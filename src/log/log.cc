#include "log/log.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <string>

#include "settings/settings.h"

namespace mpcomm {

static LogLevel configured_level() {
  static const LogLevel level = [] {
    std::string v = param_string("MPCOMM_DEBUG");
    for (char& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (v == "ERROR") return LogLevel::error;
    if (v == "INFO") return LogLevel::info;
    if (v == "TRACE") return LogLevel::trace;
    return LogLevel::warn;
  }();
  return level;
}

bool log_enabled(LogLevel level) { return level <= configured_level(); }

void log(LogLevel level, const char* fmt, ...) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "TRACE"};
  char buf[2048];
  int n = std::snprintf(buf, sizeof buf, "mpcomm[pid %d] %s: ", static_cast<int>(getpid()),
                        names[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "%s\n", buf);
}

}  // namespace mpcomm
