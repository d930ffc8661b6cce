// mpcomm info: what this build and this machine offer.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "commands.h"
#include "core/params.h"
#include "core/reduce.h"
#include "mpcomm/mpcomm.h"

namespace mpcomm::cli {

Runner add_info(CLI::App& app) {
  return [] {
    std::printf("mpcomm %s\n", MPCOMM_VERSION);
    std::printf("backends:\n");
    for (const auto& b : available_backends())
      std::printf("  %-8s %s\n", b.c_str(),
                  b == "native" ? "shared memory within a host, TCP between hosts" : "");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    std::printf("host: %s, %u cores, %.1f GiB memory, reduction kernels: %s\n", host,
                std::thread::hardware_concurrency(), static_cast<double>(pages) * page / (1 << 30), reduce_kernel_isa());
    std::printf("environment:\n");
    for (const auto& p : all_params()) {
      std::string v = param_string(p.name);
      std::printf("  %-22s %-12s %s\n", p.name, v.empty() ? "(unset)" : v.c_str(), p.doc);
    }
    return 0;
  };
}

}  // namespace mpcomm::cli
