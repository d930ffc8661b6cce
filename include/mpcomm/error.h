// mpcomm/error.h — every failure surfaces as an mpcomm::Error whose message names what failed,
// where (op, sequence number, rank, peer) and why. Catch the subclasses to react to a category.
#pragma once

#include <stdexcept>
#include <string>

#include "mpcomm/export.h"

namespace mpcomm {

enum class ErrorCode { invalid_argument, timeout, peer_failure, mismatch, unsupported, internal, revoked };

MPCOMM_API std::string_view to_string(ErrorCode c);

class MPCOMM_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// A bad argument, rejected at the call before any traffic.
struct MPCOMM_API InvalidArgument : Error {
  explicit InvalidArgument(const std::string& w) : Error(ErrorCode::invalid_argument, w) {}
};
// A bounded wait ran out (MPCOMM_TIMEOUT): a peer or the store never answered.
struct MPCOMM_API Timeout : Error {
  explicit Timeout(const std::string& w) : Error(ErrorCode::timeout, w) {}
};
// A peer died, closed its connection, or another rank reported a failure.
struct MPCOMM_API PeerFailure : Error {
  explicit PeerFailure(const std::string& w) : Error(ErrorCode::peer_failure, w) {}
};
// Ranks called different collectives, or the same one with different arguments.
struct MPCOMM_API Mismatch : Error {
  explicit Mismatch(const std::string& w) : Error(ErrorCode::mismatch, w) {}
};
// A valid request that this backend or build cannot serve.
struct MPCOMM_API Unsupported : Error {
  explicit Unsupported(const std::string& w) : Error(ErrorCode::unsupported, w) {}
};
// A broken invariant or a failed system call.
struct MPCOMM_API Internal : Error {
  explicit Internal(const std::string& w) : Error(ErrorCode::internal, w) {}
};

// An op of a communicator that shrink() replaced: it was pending, or issued after.
struct MPCOMM_API Revoked : Error {
  explicit Revoked(const std::string& w) : Error(ErrorCode::revoked, w) {}
};

// Throw the subclass that belongs to `code`.
[[noreturn]] MPCOMM_API void throw_error(ErrorCode code, const std::string& what);

}  // namespace mpcomm
