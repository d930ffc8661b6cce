#include "mpcomm/error.h"

namespace mpcomm {

std::string_view to_string(ErrorCode c) {
  switch (c) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::peer_failure: return "peer failure";
    case ErrorCode::mismatch: return "mismatch";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::internal: return "internal error";
    case ErrorCode::revoked:
      return "revoked";
  }
  return "unknown error";
}

void throw_error(ErrorCode code, const std::string& what) {
  switch (code) {
    case ErrorCode::invalid_argument: throw InvalidArgument(what);
    case ErrorCode::timeout: throw Timeout(what);
    case ErrorCode::peer_failure: throw PeerFailure(what);
    case ErrorCode::mismatch: throw Mismatch(what);
    case ErrorCode::unsupported: throw Unsupported(what);
    case ErrorCode::revoked:
      throw Revoked(what);
    case ErrorCode::internal: break;
  }
  throw Internal(what);
}

}  // namespace mpcomm
