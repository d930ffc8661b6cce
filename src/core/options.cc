// Options::resolved(): every unset field of a communicator's options from the environment's knobs
// (settings/settings.h). The bind address needs the store, so create() chooses it
// (bootstrap/bind_address.h).
#include <unistd.h>

#include "mpcomm/communicator.h"
#include "settings/settings.h"

namespace mpcomm {

Options Options::resolved() const {
  Options o = *this;
  check_params(o);
  if (o.timeout.count() <= 0) {
    double s = param_double(*this, "MPCOMM_TIMEOUT");
    if (s <= 0) throw InvalidArgument("mpcomm: MPCOMM_TIMEOUT must be a positive number of seconds");
    o.timeout = Millis(static_cast<int64_t>(s * 1000));
  }
  if (o.host_id.empty()) {
    o.host_id = param_string(*this, "MPCOMM_HOST_ID");
    if (o.host_id.empty()) {
      char buf[256] = {};
      ::gethostname(buf, sizeof buf - 1);
      o.host_id = buf;
    }
  }
  if (o.check < 0) o.check = param_int(*this, "MPCOMM_CHECK") != 0 ? 1 : 0;
  if (o.staging < 0) o.staging = param_int(*this, "MPCOMM_STAGING") != 0 ? 1 : 0;
  if (o.reproducible < 0) o.reproducible = param_int(*this, "MPCOMM_REPRODUCIBLE") != 0 ? 1 : 0;
  if (o.elastic < 0) o.elastic = param_int(*this, "MPCOMM_ELASTIC") != 0 ? 1 : 0;
  if (o.token.empty()) o.token = param_string(*this, "MPCOMM_TOKEN");
  if (o.device.kind == Device::cpu) o.device = parse_device(param_string(*this, "MPCOMM_DEVICE"));
  return o;
}

}  // namespace mpcomm
