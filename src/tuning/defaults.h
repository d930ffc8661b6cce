// The built-in selection tables, as text in the format of table_format.cc (each backend's in one file:
// native_defaults.cc). A communicator's MPCOMM_TUNING file is consulted before them; where it has no
// row for a call, they answer. Why each row is what it is: docs/performance.md, "Why the defaults are
// what they are".
#pragma once

#include <string_view>

namespace mpcomm::tuning {

// The built-in table of `backend` ("" when it has none).
std::string_view builtin_table_text(std::string_view backend);

}  // namespace mpcomm::tuning
