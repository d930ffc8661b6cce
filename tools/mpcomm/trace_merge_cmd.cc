// mpcomm trace-merge OUT PARTS...: joins the part files MPCOMM_TRACE leaves when the ranks do not share a
// file system (FILE.rank<R>of<N>, copied together) into one timeline.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "mpcomm/trace.h"

namespace mpcomm::cli {

Runner add_trace_merge(CLI::App& app) {
  auto out = std::make_shared<std::string>();
  auto parts = std::make_shared<std::vector<std::string>>();
  app.add_option("out", *out, "the merged timeline to write")->required();
  app.add_option("parts", *parts, "the ranks' part files (FILE.rank<R>of<N>)")->required()->check(CLI::ExistingFile);
  return [out, parts] {
    const size_t bytes = trace::merge_parts(*out, *parts);
    std::printf("%s: %zu parts, %zu bytes\n", out->c_str(), parts->size(), bytes);
    return 0;
  };
}

}  // namespace mpcomm::cli
