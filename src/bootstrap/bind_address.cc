// The address a rank's listeners bind to and advertise (bind_address.h).
#include "bootstrap/bind_address.h"

#include <cstdlib>

#include "log/log.h"
#include "mpcomm/error.h"
#include "net/socket.h"
#include "settings/settings.h"

namespace mpcomm {

std::string choose_bind_address(const Options& opts, const Store* store) {
  std::string addr = param_string(opts, "MPCOMM_ADDR");
  if (!addr.empty()) return addr;
  const std::string ifname = param_string(opts, "MPCOMM_IFNAME");
  if (!ifname.empty()) {
    addr = net::interface_address(ifname);
    MPCOMM_LOG(info, "advertising %s (MPCOMM_IFNAME=%s)", addr.c_str(), ifname.c_str());
    return addr;
  }
  // The store's host, else MASTER_ADDR: the host every rank reaches, so the route there leaves by the
  // interface the other hosts reach this one on.
  std::string toward = store != nullptr ? store->server_host() : "", why = "the store's host";
  if (const char* m = std::getenv("MASTER_ADDR"); toward.empty() && m != nullptr && *m != '\0') {
    toward = m;
    why = "MASTER_ADDR";
  }
  if (!toward.empty() && !net::is_loopback_literal(toward) && net::is_loopback(toward)) {
    // A name for this machine that resolves to loopback here only (Debian's "127.0.1.1 <hostname>"):
    // the other machines reach this one on its network interface.
    try {
      addr = net::interface_address("^lo");
      MPCOMM_LOG(warn, "%s %s resolves to a loopback address on this machine; advertising %s, the first address of "
                 "an interface other than lo (set MPCOMM_IFNAME or MPCOMM_ADDR to choose)", why.c_str(), toward.c_str(),
                 addr.c_str());
      return addr;
    } catch (const Error&) {
      return "127.0.0.1";  // no other interface: a job of this machine only
    }
  }
  if (!toward.empty() && !net::is_loopback(toward)) {
    try {
      addr = net::address_toward(toward);
      MPCOMM_LOG(info, "advertising %s: the address that routes to %s %s", addr.c_str(), why.c_str(), toward.c_str());
      return addr;
    } catch (const Error& e) {
      MPCOMM_LOG(warn, "no local address routes to %s %s (%s); advertising 127.0.0.1 (set MPCOMM_IFNAME or MPCOMM_ADDR)",
                 why.c_str(), toward.c_str(), e.what());
    }
  }
  return "127.0.0.1";
}

}  // namespace mpcomm
