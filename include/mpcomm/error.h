// mpcomm/error.h — every failure surfaces as an mpcomm::Error whose message names what failed,
// where (op, sequence number, rank, peer) and why. Catch the subclasses to react to a category.
#pragma once

#include <stdexcept>
#include <string>

namespace mpcomm {

enum class ErrorCode { invalid_argument, timeout, peer_failure, mismatch, unsupported, internal };

std::string_view to_string(ErrorCode c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// A bad argument, rejected at the call before any traffic.
struct InvalidArgument : Error {
  explicit InvalidArgument(const std::string& w) : Error(ErrorCode::invalid_argument, w) {}
};
// A bounded wait ran out (MPCOMM_TIMEOUT): a peer or the store never answered.
struct Timeout : Error {
  explicit Timeout(const std::string& w) : Error(ErrorCode::timeout, w) {}
};
// A peer died, closed its connection, or another rank reported a failure.
struct PeerFailure : Error {
  explicit PeerFailure(const std::string& w) : Error(ErrorCode::peer_failure, w) {}
};
// Ranks called different collectives, or the same one with different arguments.
struct Mismatch : Error {
  explicit Mismatch(const std::string& w) : Error(ErrorCode::mismatch, w) {}
};
// A valid request that this backend or build cannot serve.
struct Unsupported : Error {
  explicit Unsupported(const std::string& w) : Error(ErrorCode::unsupported, w) {}
};
// A broken invariant or a failed system call.
struct Internal : Error {
  explicit Internal(const std::string& w) : Error(ErrorCode::internal, w) {}
};

// Throw the subclass that belongs to `code`.
[[noreturn]] void throw_error(ErrorCode code, const std::string& what);

}  // namespace mpcomm
