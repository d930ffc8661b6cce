#include "bootstrap/abort_key.h"

namespace mpcomm {

void publish_abort_reason(Store& store, const std::string& reason) {
  if (!store.check({kAbortKey})) store.set_string(kAbortKey, reason);
}

std::string read_abort_reason(Store& store) {
  if (!store.check({kAbortKey})) return "";
  return store.get_string(kAbortKey, Millis(1000));
}

}  // namespace mpcomm
