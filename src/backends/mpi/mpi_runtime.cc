// Open MPI's lifetime, types, ops and errors (mpi_runtime.h).
#include "backends/mpi/mpi_runtime.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>

#include "kernels/reduce.h"
#include "log/log.h"

namespace mpcomm::mpi {

namespace {

// One MPI call carries at most this many bytes (and at most INT_MAX elements): well inside what every
// Open MPI code path computes in int.
constexpr size_t kChunkBytes = size_t{1} << 30;

template <DataType D, ReduceOp R>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  // MPI wants inout = in op inout; every op here is commutative, so inout op= in is the same.
  reduce_inplace(inout, in, static_cast<size_t>(*len), D, R);
}

std::mutex g_init_mu;
// Never deleted: it must outlive every static destructor and atexit handler.
std::atomic<Runtime*> g_runtime{nullptr};

}  // namespace

std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(std::max(len, 0)));
}

int mpi_error_class(int rc) {
  int cls = rc;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) return rc;
  return cls;
}

void throw_mpi(ErrorCode code, const std::string& what, const std::string& call, int rc, const std::string& detail) {
  throw_error(code, "mpcomm: " + what + ": " + call + " failed: " + mpi_error_text(rc) + detail);
}

Runtime& Runtime::get() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) return *rt;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) return *rt;
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin) throw Internal("mpcomm: mpi: MPI was already finalized in this process and cannot be initialised again");
  auto* rt = new Runtime();
  if (!inited) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &rt->provided_);
    if (rc != MPI_SUCCESS) {
      delete rt;
      throw_mpi(ErrorCode::internal, "mpi backend initialisation", "MPI_Init_thread", rc);
    }
    rt->initialized_here_ = true;
    ::on_exit(&Runtime::at_exit, nullptr);
  } else {
    MPI_Query_thread(&rt->provided_);
  }
  rt->serialize_ = rt->provided_ < MPI_THREAD_MULTIPLE;
  if (rt->serialize_)
    MPCOMM_LOG(warn,
               "mpi: MPI provides thread level %d, not MPI_THREAD_MULTIPLE (%d); mpcomm serialises its MPI "
               "calls%s",
               rt->provided_, MPI_THREAD_MULTIPLE,
               rt->provided_ < MPI_THREAD_SERIALIZED ? ", but only the main thread may use mpi communicators" : "");
  using D = DataType;
  using R = ReduceOp;
  MPI_User_function* fns[2][4] = {{half_reduce<D::float16, R::sum>, half_reduce<D::float16, R::prod>,
                                   half_reduce<D::float16, R::min>, half_reduce<D::float16, R::max>},
                                  {half_reduce<D::bfloat16, R::sum>, half_reduce<D::bfloat16, R::prod>,
                                   half_reduce<D::bfloat16, R::min>, half_reduce<D::bfloat16, R::max>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 4; ++o) {
      int rc = MPI_Op_create(fns[t][o], /*commute=*/1, &rt->half_ops_[t][o]);
      if (rc != MPI_SUCCESS) throw_mpi(ErrorCode::internal, "mpi backend initialisation", "MPI_Op_create", rc);
    }
  g_runtime.store(rt, std::memory_order_release);
  return *rt;
}

void Runtime::at_exit(int status, void*) {
  Runtime& rt = *g_runtime.load();
  std::lock_guard<std::mutex> lock(rt.mu_);
  rt.exiting_ = true;
  rt.exit_status_ = status;
  if (rt.live_ == 0) rt.finalize_locked();
  // Otherwise the last communicator to go (a static, destroyed after this handler) finalises.
}

void Runtime::finalize_locked() {
  if (!initialized_here_ || finalized_) return;
  finalized_ = true;
  if (stuck_) {
    MPCOMM_LOG(info, "mpi: not calling MPI_Finalize: a communicator was aborted with MPI calls in flight");
    return;
  }
  if (exit_status_ != 0) {
    MPCOMM_LOG(info, "mpi: exit status %d: not calling MPI_Finalize, which would wait for every other rank",
               exit_status_);
    return;
  }
  for (auto& row : half_ops_)
    for (MPI_Op& op : row) MPI_Op_free(&op);
  if (int rc = MPI_Finalize(); rc != MPI_SUCCESS)
    MPCOMM_LOG(warn, "mpi: MPI_Finalize failed: %s", mpi_error_text(rc).c_str());
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::int8:
      return MPI_INT8_T;
    case DataType::uint8:
      return MPI_UINT8_T;
    case DataType::int32:
      return MPI_INT32_T;
    case DataType::int64:
      return MPI_INT64_T;
    case DataType::float16:
    case DataType::bfloat16:
      return MPI_UINT16_T;  // reduced by the user-defined ops above
    case DataType::float32:
      return MPI_FLOAT;
    case DataType::float64:
      return MPI_DOUBLE;
  }
  throw InvalidArgument("mpcomm: mpi: unknown DataType value " + std::to_string(static_cast<int>(t)));
}

MPI_Op mpi_op(DataType t, ReduceOp op) {
  if (t == DataType::float16 || t == DataType::bfloat16) return Runtime::get().half_op(t, op);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;  // avg: sum, then divide_by() where the result lives
    case ReduceOp::prod:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::band:
      return MPI_BAND;
    case ReduceOp::bor:
      return MPI_BOR;
    case ReduceOp::bxor:
      return MPI_BXOR;
  }
  throw InvalidArgument("mpcomm: mpi: unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
}

size_t chunk_elements(size_t elem_size, size_t forced) {
  if (forced > 0) return forced;
  return std::min(kChunkBytes / elem_size, static_cast<size_t>(INT_MAX));
}

}  // namespace mpcomm::mpi
