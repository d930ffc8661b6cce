// Open MPI as the mpi backend uses it: MPI's lifetime in this process (Runtime), MPI's names for
// mpcomm's data types and reduce ops, and MPI's errors in mpcomm's words.
#pragma once

// The C API only: mpi.h would otherwise pull in the deprecated C++ bindings, which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstddef>
#include <mutex>
#include <string>

#include "mpcomm/error.h"
#include "mpcomm/types.h"

namespace mpcomm::mpi {

// MPI's text for an error code, and its class.
std::string mpi_error_text(int rc);
int mpi_error_class(int rc);
// "mpcomm: <what>: MPI_Xxx failed: <MPI_Error_string>"
[[noreturn]] void throw_mpi(ErrorCode code, const std::string& what, const std::string& call, int rc,
                            const std::string& detail = "");

// MPI's lifetime: initialised at the first communicator (MPI_THREAD_MULTIPLE requested, less accepted),
// finalised at a successful exit after the last one, and never when a communicator was aborted with
// calls in flight or the process exits with a failure status (MPI_Finalize would wait for every other
// rank). Owns the user-defined float16/bfloat16 reduce ops.
class Runtime {
 public:
  // Initialises MPI on the first call.
  static Runtime& get();

  // Serialises MPI calls when MPI gave us less than MPI_THREAD_MULTIPLE (several communicators may
  // run on several threads); a no-op lock otherwise.
  std::unique_lock<std::mutex> guard() {
    return serialize_ ? std::unique_lock<std::mutex>(call_mu_) : std::unique_lock<std::mutex>();
  }

  // float16/bfloat16 ops, accumulating in float32 through mpcomm's kernels. avg reduces as sum.
  MPI_Op half_op(DataType dt, ReduceOp op) const {
    if (is_bitwise(op)) throw Internal("mpcomm: mpi: no " + std::string(to_string(op)) + " for " + std::string(to_string(dt)));
    return half_ops_[dt == DataType::bfloat16 ? 1 : 0][op == ReduceOp::avg ? 0 : static_cast<int>(op)];
  }

  void acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    ++live_;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--live_ == 0 && exiting_) finalize_locked();
  }
  // A communicator was aborted with MPI calls in flight: MPI_Finalize would wait for ranks that may
  // never arrive.
  void note_stuck() {
    std::lock_guard<std::mutex> lock(mu_);
    stuck_ = true;
  }
  bool finalized() {
    std::lock_guard<std::mutex> lock(mu_);
    return finalized_;
  }
  int provided() const { return provided_; }

 private:
  Runtime() = default;
  static void at_exit(int status, void*);
  void finalize_locked();

  std::mutex mu_;  // guards the lifetime fields below
  int live_ = 0;   // CommStates alive
  bool initialized_here_ = false;
  bool exiting_ = false;
  bool stuck_ = false;
  bool finalized_ = false;
  int exit_status_ = 0;

  int provided_ = MPI_THREAD_SINGLE;
  bool serialize_ = false;
  std::mutex call_mu_;
  MPI_Op half_ops_[2][4] = {};
};

MPI_Datatype mpi_type(DataType t);
// Integer sum/prod of MPI's built-in ops wrap like ours (two's complement arithmetic on the type); avg is
// MPI's sum (divided afterwards where the result lives).
MPI_Op mpi_op(DataType t, ReduceOp op);
// Elements per MPI call: `forced` when set (MPCOMM_MPI_CHUNK_ELEMENTS: tests cross chunk boundaries with
// small counts), else as many as kChunkBytes and INT_MAX allow.
size_t chunk_elements(size_t elem_size, size_t forced);

}  // namespace mpcomm::mpi
