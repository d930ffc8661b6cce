#include "torch/process_group.h"

#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <functional>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <stdexcept>

#include "torch/c10d_store.h"

namespace mpcomm::torch_backend {

// ---- Work ---------------------------------------------------------------------------------------------

// One PyTorch op: the mpcomm requests it issued, the tensors it must keep alive until they end, and the
// copies back into the caller's tensors that follow a successful end.
class MpcommWork final : public c10d::Work {
 public:
  MpcommWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, ProcessGroupMpcomm* pg)
      : c10d::Work(rank, type), outputs_(std::move(outputs)), pg_(pg) {}

  std::vector<Request> requests;
  std::vector<at::Tensor> keep;                 // buffers the requests use
  std::vector<std::function<void()>> copy_out;  // after success, in order

  bool isCompleted() override {
    if (done()) return true;
    std::exception_ptr error;
    try {
      for (auto& r : requests)
        if (!r.test()) return false;
    } catch (const std::exception& e) {
      error = as_python_error(e);
    }
    conclude(error);
    return true;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    std::exception_ptr error;
    try {
      if (timeout == kNoTimeout) {
        for (auto& r : requests) r.wait();
      } else {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (auto& r : requests)
          while (!r.test()) {
            if (std::chrono::steady_clock::now() >= deadline)
              throw std::runtime_error("mpcomm: " + std::string(c10d::opTypeToString(opType_)) +
                                       ": not completed within work.wait()'s timeout of " +
                                       std::to_string(timeout.count()) + " ms (the op goes on)");
            std::this_thread::sleep_for(std::chrono::microseconds(50));
          }
      }
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("within work.wait()'s timeout") != std::string::npos) throw;
      error = as_python_error(e);
    } catch (const std::exception& e) {
      error = as_python_error(e);
    }
    conclude(error);
    std::lock_guard<std::mutex> g(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    bool arm = false;
    {
      std::lock_guard<std::mutex> g(future_mu_);
      if (!future_) {
        future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
        arm = true;
      }
    }
    if (arm) {
      if (done()) {
        fulfil();
      } else {
        // The last request to end hands the work to the group's completion thread.
        auto left = std::make_shared<std::atomic<size_t>>(requests.size());
        c10::intrusive_ptr<MpcommWork> self = c10::intrusive_ptr<MpcommWork>::reclaim_copy(this);
        for (auto& r : requests)
          r.on_complete([self, left](std::exception_ptr) {
            if (left->fetch_sub(1) == 1) self->pg_->completed(self);
          });
      }
    }
    std::lock_guard<std::mutex> g(future_mu_);
    return future_;
  }

  // Ends the work once: copies back on success, records the error otherwise, fulfils the future.
  // (A mutex and a flag, not std::call_once: glibc's call_once makes a futex system call every time.)
  void conclude(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> once(conclude_mu_);
      if (!concluded_) {
        concluded_ = true;
        if (!error) {
          try {
            for (auto& f : copy_out) f();
          } catch (const std::exception& e) {
            error = as_python_error(e);
          }
        }
        keep.clear();
        finish(error);
      }
    }
    fulfil();
  }

  // Called by the completion thread: every request ended.
  void on_ended() {
    std::exception_ptr error;
    try {
      for (auto& r : requests) r.wait();  // ended already: returns or throws at once
    } catch (const std::exception& e) {
      error = as_python_error(e);
    }
    conclude(error);
  }

 private:
  bool done() {
    std::lock_guard<std::mutex> g(mutex_);
    return completed_;
  }

  void fulfil() {
    c10::intrusive_ptr<c10::ivalue::Future> f;
    {
      std::lock_guard<std::mutex> g(future_mu_);
      f = future_;
    }
    if (!f || f->completed() || !done()) return;
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> g(mutex_);
      error = exception_;
    }
    std::lock_guard<std::mutex> g(fulfil_mu_);
    if (f->completed()) return;
    if (error)
      f->setError(error);
    else
      f->markCompleted(c10::IValue(outputs_));
  }

  // mpcomm's errors reach Python as RuntimeError with mpcomm's message.
  static std::exception_ptr as_python_error(const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(e.what()));
  }

  std::vector<at::Tensor> outputs_;
  ProcessGroupMpcomm* pg_;
  std::mutex conclude_mu_;
  bool concluded_ = false;  // under conclude_mu_
  std::mutex future_mu_, fulfil_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---- checks and conversions ---------------------------------------------------------------------------

namespace {

[[noreturn]] void refuse(const std::string& op, const std::string& why) {
  throw std::invalid_argument("mpcomm: " + op + ": " + why);
}

DataType to_mpcomm(const at::Tensor& t, const std::string& op) {
  switch (t.scalar_type()) {
    case at::kHalf: return DataType::float16;
    case at::kBFloat16: return DataType::bfloat16;
    case at::kFloat: return DataType::float32;
    case at::kDouble: return DataType::float64;
    case at::kChar: return DataType::int8;
    case at::kByte: return DataType::uint8;
    case at::kBool: return DataType::uint8;
    case at::kInt: return DataType::int32;
    case at::kLong: return DataType::int64;
    default:
      refuse(op, std::string("dtype ") + c10::toString(t.scalar_type()) +
                     " is not supported (float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool are)");
  }
}

ReduceOp to_mpcomm(const c10d::ReduceOp& r, const at::Tensor& t, const std::string& op) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (r.op_) {
    // bool: a sum or maximum is a logical or, a product or minimum a logical and (as in NCCL).
    case c10d::ReduceOp::SUM: return is_bool ? ReduceOp::max : ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      if (is_bool) refuse(op, "AVG of bool tensors has no meaning");
      return ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT: return is_bool ? ReduceOp::min : ReduceOp::prod;
    case c10d::ReduceOp::MIN: return ReduceOp::min;
    case c10d::ReduceOp::MAX: return ReduceOp::max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      const char* name = r.op_ == c10d::ReduceOp::BAND ? "BAND" : r.op_ == c10d::ReduceOp::BOR ? "BOR" : "BXOR";
      if (t.is_floating_point())
        refuse(op, std::string(name) + " needs an integer or bool tensor, not " + c10::toString(t.scalar_type()));
      // bool tensors hold 0 or 1 per byte: the bitwise ops on those bytes are the logical ones.
      return r.op_ == c10d::ReduceOp::BAND ? ReduceOp::band : r.op_ == c10d::ReduceOp::BOR ? ReduceOp::bor : ReduceOp::bxor;
    }
    case c10d::ReduceOp::PREMUL_SUM:
      refuse(op, "PREMUL_SUM (NCCL's pre-multiplied sum) is not supported (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
    default:
      refuse(op, "reduce op " + std::to_string(static_cast<int>(r.op_)) +
                     " is not supported (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)");
  }
}

// A tensor this group can hand to the communicator: strided, of a supported dtype, on the group's device.
void check_tensor(const at::Tensor& t, const std::string& op, const Communicator& c) {
  if (!t.defined()) refuse(op, "a tensor argument is undefined (None)");
  if (t.layout() != at::kStrided) refuse(op, "only dense (strided) tensors are supported, not sparse ones");
  const bool want_cuda = c.options().device.kind == Device::cuda;
  if (t.device().is_cuda() != want_cuda || (!t.device().is_cuda() && !t.device().is_cpu()))
    refuse(op, "tensor on " + t.device().str() + ", but this group's communicator (mpcomm backend '" +
                   std::string(c.backend()) + "') takes " + (want_cuda ? "CUDA" : "CPU") +
                   " tensors (set MPCOMM_BACKEND=nccl and MPCOMM_DEVICE=cuda for GPU tensors)");
  to_mpcomm(t, op);
}

void check_list(const std::vector<at::Tensor>& ts, size_t n, const std::string& op, const std::string& what) {
  if (ts.size() != n)
    refuse(op, what + " must hold " + std::to_string(n) + " tensor(s), got " + std::to_string(ts.size()));
}

void check_same(const at::Tensor& a, const at::Tensor& b, const std::string& op, const std::string& what) {
  if (a.scalar_type() != b.scalar_type())
    refuse(op, what + ": dtypes differ (" + std::string(c10::toString(a.scalar_type())) + " and " +
                   c10::toString(b.scalar_type()) + ")");
  if (a.numel() != b.numel())
    refuse(op, what + ": sizes differ (" + std::to_string(a.numel()) + " and " + std::to_string(b.numel()) +
                   " elements)");
}

void check_root(int64_t root, int size, const std::string& op) {
  if (root < 0 || root >= size)
    refuse(op, "root rank " + std::to_string(root) + " is out of range [0, " + std::to_string(size) + ")");
}

size_t elems(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

// A contiguous tensor with t's data: t itself, or a copy (copied back into t after the op when `out`).
at::Tensor contiguous(MpcommWork& w, const at::Tensor& t, bool out) {
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (out) w.copy_out.push_back([t, c]() mutable { t.copy_(c); });
  w.keep.push_back(c);
  return c;
}

// One flat buffer for a list of tensors of one dtype, each element copied in (when `in`).
at::Tensor flat(MpcommWork& w, const std::vector<at::Tensor>& ts, const at::Tensor& like, bool in) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  at::Tensor f = at::empty({n}, like.options().memory_format(c10::nullopt));
  if (in) {
    int64_t off = 0;
    for (const auto& t : ts) {
      f.narrow(0, off, t.numel()).copy_(t.reshape({-1}));
      off += t.numel();
    }
  }
  w.keep.push_back(f);
  return f;
}

// After the op: every tensor of `ts` gets its part of `f`.
void unflatten_after(MpcommWork& w, const at::Tensor& f, std::vector<at::Tensor> ts) {
  w.copy_out.push_back([f, ts]() mutable {
    int64_t off = 0;
    for (auto& t : ts) {
      t.copy_(f.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

Millis group_timeout(std::chrono::milliseconds t) { return t.count() > 0 ? Millis(t.count()) : Millis(0); }

}  // namespace

// ---- the group ----------------------------------------------------------------------------------------

ProcessGroupMpcomm::ProcessGroupMpcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  const char* b = std::getenv("MPCOMM_BACKEND");
  const std::string backend = b && *b ? b : "native";
  mpcomm::Options opts;
  opts.timeout = group_timeout(timeout);
  comm_ = create(backend, std::make_shared<C10dStore>(store), rank, size, opts);
  done_thread_ = std::thread(&ProcessGroupMpcomm::completion_loop, this);
}

ProcessGroupMpcomm::~ProcessGroupMpcomm() {
  {
    std::lock_guard<std::mutex> g(done_mu_);
    stop_ = true;
  }
  done_cv_.notify_all();
  done_thread_.join();
  comm_.reset();
}

void ProcessGroupMpcomm::completed(c10::intrusive_ptr<MpcommWork> work) {
  {
    std::lock_guard<std::mutex> g(done_mu_);
    done_.push_back(std::move(work));
  }
  done_cv_.notify_one();
}

void ProcessGroupMpcomm::completion_loop() {
  std::unique_lock<std::mutex> lk(done_mu_);
  for (;;) {
    done_cv_.wait(lk, [&] { return stop_ || !done_.empty(); });
    if (done_.empty()) return;
    auto w = std::move(done_.front());
    done_.pop_front();
    lk.unlock();
    w->on_ended();
    w.reset();
    lk.lock();
  }
}

template <class F>
ProcessGroupMpcomm::Works ProcessGroupMpcomm::launch(c10d::OpType type, const char* /*name*/,
                                                     std::vector<at::Tensor> outputs, F&& issue) {
  auto w = c10::make_intrusive<MpcommWork>(getRank(), type, std::move(outputs), this);
  {
    std::lock_guard<std::mutex> g(issue_mu_);
    issue(*w);
  }
  return w;
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  const std::string op = "broadcast";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  check_root(opts.rootRank, getSize(), op);
  return launch(c10d::OpType::BROADCAST, "broadcast", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->ibroadcast(t.data_ptr(), elems(t), to_mpcomm(t, op), static_cast<int>(opts.rootRank)));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  const std::string op = "allreduce";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  return launch(c10d::OpType::ALLREDUCE, "allreduce", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->iallreduce(t.data_ptr(), t.data_ptr(), elems(t), to_mpcomm(t, op), r));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  const std::string op = "allreduce_coalesced";
  if (tensors.empty()) refuse(op, "the tensor list is empty");
  for (const auto& t : tensors) {
    check_tensor(t, op, *comm_);
    if (t.scalar_type() != tensors[0].scalar_type())
      refuse(op, "every tensor must have one dtype (" + std::string(c10::toString(tensors[0].scalar_type())) +
                     " and " + c10::toString(t.scalar_type()) + " given)");
  }
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  return launch(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, [&](MpcommWork& w) {
    at::Tensor f = flat(w, tensors, tensors[0], true);
    unflatten_after(w, f, tensors);
    w.requests.push_back(comm_->iallreduce(f.data_ptr(), f.data_ptr(), elems(f), to_mpcomm(f, op), r));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const std::string op = "reduce";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  check_root(opts.rootRank, getSize(), op);
  const ReduceOp r = to_mpcomm(opts.reduceOp, tensors[0], op);
  const int root = static_cast<int>(opts.rootRank);
  return launch(c10d::OpType::REDUCE, "reduce", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], getRank() == root);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->ireduce(t.data_ptr(), getRank() == root ? t.data_ptr() : nullptr, elems(t),
                                        to_mpcomm(t, op), r, root));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions&) {
  const std::string op = "allgather";
  check_list(inputs, 1, op, "the input list");
  if (outputs.size() != 1) refuse(op, "the output must be one list of tensors, got " + std::to_string(outputs.size()));
  check_list(outputs[0], static_cast<size_t>(getSize()), op, "the output list");
  const at::Tensor& in = inputs[0];
  check_tensor(in, op, *comm_);
  bool even = true;
  for (const auto& o : outputs[0]) {
    check_tensor(o, op, *comm_);
    if (o.scalar_type() != in.scalar_type())
      refuse(op, "output dtype " + std::string(c10::toString(o.scalar_type())) + " differs from the input's " +
                     c10::toString(in.scalar_type()));
    even = even && o.numel() == in.numel();
  }
  check_same(outputs[0][static_cast<size_t>(getRank())], in, op, "this rank's output and its input");
  return launch(c10d::OpType::ALLGATHER, "allgather", outputs[0], [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, in, false);
    w.keep.push_back(in);
    at::Tensor f = flat(w, outputs[0], in, false);
    unflatten_after(w, f, outputs[0]);
    const DataType dt = to_mpcomm(in, op);
    if (even) {
      w.requests.push_back(comm_->iallgather(src.data_ptr(), f.data_ptr(), elems(src), dt));
    } else {
      std::vector<size_t> counts, displs;
      size_t off = 0;
      for (const auto& o : outputs[0]) {
        counts.push_back(elems(o));
        displs.push_back(off);
        off += elems(o);
      }
      w.requests.push_back(comm_->iallgatherv(src.data_ptr(), elems(src), f.data_ptr(), counts, displs, dt));
    }
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions&) {
  const std::string op = "_allgather_base";
  check_tensor(input, op, *comm_);
  check_tensor(output, op, *comm_);
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  if (output.numel() != input.numel() * getSize())
    refuse(op, "the output holds " + std::to_string(output.numel()) + " elements, not world size × input = " +
                   std::to_string(input.numel() * getSize()));
  return launch(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    w.requests.push_back(comm_->iallgather(src.data_ptr(), dst.data_ptr(), elems(src), to_mpcomm(src, op)));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions&) {
  const std::string op = "allgather_coalesced";
  if (inputs.empty()) refuse(op, "the input list is empty");
  check_list(std::vector<at::Tensor>(outputs.size()), static_cast<size_t>(getSize()), op, "the output lists");
  for (const auto& t : inputs) {
    check_tensor(t, op, *comm_);
    if (t.scalar_type() != inputs[0].scalar_type()) refuse(op, "every input must have one dtype");
  }
  for (const auto& list : outputs) {
    check_list(list, inputs.size(), op, "each output list");
    for (size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], op, *comm_);
      check_same(list[i], inputs[i], op, "output " + std::to_string(i) + " against input " + std::to_string(i));
    }
  }
  std::vector<at::Tensor> all_out;
  for (const auto& list : outputs) all_out.insert(all_out.end(), list.begin(), list.end());
  return launch(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all_out, [&](MpcommWork& w) {
    at::Tensor in = flat(w, inputs, inputs[0], true);
    at::Tensor f = flat(w, all_out, inputs[0], false);  // rank r's block: its inputs in order
    unflatten_after(w, f, all_out);
    w.requests.push_back(comm_->iallgather(in.data_ptr(), f.data_ptr(), elems(in), to_mpcomm(in, op)));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const std::string op = "gather";
  check_list(inputs, 1, op, "the input list");
  check_tensor(inputs[0], op, *comm_);
  check_root(opts.rootRank, getSize(), op);
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = getRank() == root;
  if (at_root) {
    if (outputs.size() != 1) refuse(op, "the root needs one list of output tensors");
    check_list(outputs[0], static_cast<size_t>(getSize()), op, "the root's output list");
    for (const auto& o : outputs[0]) {
      check_tensor(o, op, *comm_);
      check_same(o, inputs[0], op, "an output against the input");
    }
  } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
    refuse(op, "only the root (rank " + std::to_string(root) + ") takes output tensors");
  }
  std::vector<at::Tensor> outs = at_root ? outputs[0] : std::vector<at::Tensor>{};
  return launch(c10d::OpType::GATHER, "gather", outs, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, inputs[0], false);
    w.keep.push_back(inputs[0]);
    void* dst = nullptr;
    if (at_root) {
      at::Tensor f = flat(w, outs, src, false);
      unflatten_after(w, f, outs);
      dst = f.data_ptr();
    }
    w.requests.push_back(comm_->igather(src.data_ptr(), dst, elems(src), to_mpcomm(src, op), root));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  const std::string op = "scatter";
  check_list(outputs, 1, op, "the output list");
  check_tensor(outputs[0], op, *comm_);
  check_root(opts.rootRank, getSize(), op);
  const int root = static_cast<int>(opts.rootRank);
  const bool at_root = getRank() == root;
  if (at_root) {
    if (inputs.size() != 1) refuse(op, "the root needs one list of input tensors");
    check_list(inputs[0], static_cast<size_t>(getSize()), op, "the root's input list");
    for (const auto& t : inputs[0]) {
      check_tensor(t, op, *comm_);
      check_same(t, outputs[0], op, "an input against the output");
    }
  } else if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty())) {
    refuse(op, "only the root (rank " + std::to_string(root) + ") takes input tensors");
  }
  return launch(c10d::OpType::SCATTER, "scatter", outputs, [&](MpcommWork& w) {
    at::Tensor dst = contiguous(w, outputs[0], true);
    w.keep.push_back(outputs[0]);
    const void* src = nullptr;
    if (at_root) src = flat(w, inputs[0], dst, true).data_ptr();
    w.requests.push_back(comm_->iscatter(src, dst.data_ptr(), elems(dst), to_mpcomm(dst, op), root));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter";
  check_list(outputs, 1, op, "the output list");
  if (inputs.size() != 1) refuse(op, "the input must be one list of tensors");
  check_list(inputs[0], static_cast<size_t>(getSize()), op, "the input list");
  check_tensor(outputs[0], op, *comm_);
  for (const auto& t : inputs[0]) {
    check_tensor(t, op, *comm_);
    check_same(t, outputs[0], op, "an input against the output");
  }
  const ReduceOp r = to_mpcomm(opts.reduceOp, outputs[0], op);
  return launch(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, [&](MpcommWork& w) {
    at::Tensor dst = contiguous(w, outputs[0], true);
    w.keep.push_back(outputs[0]);
    at::Tensor src = flat(w, inputs[0], dst, true);
    w.requests.push_back(comm_->ireduce_scatter(src.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  const std::string op = "_reduce_scatter_base";
  check_tensor(input, op, *comm_);
  check_tensor(output, op, *comm_);
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  if (input.numel() != output.numel() * getSize())
    refuse(op, "the input holds " + std::to_string(input.numel()) + " elements, not world size × output = " +
                   std::to_string(output.numel() * getSize()));
  const ReduceOp r = to_mpcomm(opts.reduceOp, output, op);
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    w.requests.push_back(comm_->ireduce_scatter(src.data_ptr(), dst.data_ptr(), elems(dst), to_mpcomm(dst, op), r));
  });
}

namespace {

// Element counts of dim-0 splits of t (rows × elements per row), checked against t's first dimension.
std::vector<size_t> split_counts(const std::vector<int64_t>& splits, const at::Tensor& t, int size,
                                 const std::string& op, const std::string& what) {
  if (static_cast<int>(splits.size()) != size)
    refuse(op, what + " split sizes must have one entry per rank (" + std::to_string(size) + "), got " +
                   std::to_string(splits.size()));
  const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const int64_t row = rows > 0 ? t.numel() / rows : 0;
  int64_t sum = 0;
  std::vector<size_t> counts;
  for (int64_t s : splits) {
    if (s < 0) refuse(op, what + " split size " + std::to_string(s) + " is negative");
    sum += s;
    counts.push_back(static_cast<size_t>(s * row));
  }
  if (sum != rows)
    refuse(op, what + " split sizes add up to " + std::to_string(sum) + " but the tensor has " + std::to_string(rows) +
                   " rows");
  return counts;
}

std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size());
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = off;
    off += counts[i];
  }
  return d;
}

}  // namespace

ProcessGroupMpcomm::Works ProcessGroupMpcomm::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_split_sizes,
                                                            std::vector<int64_t>& input_split_sizes,
                                                            const c10d::AllToAllOptions&) {
  const std::string op = "alltoall_base";
  check_tensor(input, op, *comm_);
  check_tensor(output, op, *comm_);
  if (output.scalar_type() != input.scalar_type()) refuse(op, "output and input dtypes differ");
  const int n = getSize();
  const bool even = output_split_sizes.empty() && input_split_sizes.empty();
  std::vector<size_t> sc, rc;
  if (even) {
    if (input.numel() != output.numel()) refuse(op, "output and input sizes differ");
    if (input.numel() % n != 0)
      refuse(op, "without split sizes the tensors' " + std::to_string(input.numel()) +
                     " elements must divide evenly among " + std::to_string(n) + " ranks");
  } else {
    sc = input_split_sizes.empty() ? split_counts(std::vector<int64_t>(n, input.dim() > 0 ? input.size(0) / n : 1), input, n, op, "input")
                                   : split_counts(input_split_sizes, input, n, op, "input");
    rc = output_split_sizes.empty() ? split_counts(std::vector<int64_t>(n, output.dim() > 0 ? output.size(0) / n : 1), output, n, op, "output")
                                    : split_counts(output_split_sizes, output, n, op, "output");
  }
  return launch(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, [&](MpcommWork& w) {
    at::Tensor src = contiguous(w, input, false);
    at::Tensor dst = contiguous(w, output, true);
    w.keep.insert(w.keep.end(), {input, output});
    const DataType dt = to_mpcomm(src, op);
    if (even)
      w.requests.push_back(comm_->ialltoall(src.data_ptr(), dst.data_ptr(), elems(src) / static_cast<size_t>(n), dt));
    else
      w.requests.push_back(comm_->ialltoallv(src.data_ptr(), sc, displacements(sc), dst.data_ptr(), rc,
                                             displacements(rc), dt));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions&) {
  const std::string op = "alltoall";
  const size_t n = static_cast<size_t>(getSize());
  check_list(inputs, n, op, "the input list");
  check_list(outputs, n, op, "the output list");
  for (size_t i = 0; i < n; ++i) {
    check_tensor(inputs[i], op, *comm_);
    check_tensor(outputs[i], op, *comm_);
    if (inputs[i].scalar_type() != inputs[0].scalar_type() || outputs[i].scalar_type() != inputs[0].scalar_type())
      refuse(op, "every input and output must have one dtype");
  }
  return launch(c10d::OpType::ALLTOALL, "alltoall", outputs, [&](MpcommWork& w) {
    at::Tensor src = flat(w, inputs, inputs[0], true);
    at::Tensor dst = flat(w, outputs, inputs[0], false);
    unflatten_after(w, dst, outputs);
    std::vector<size_t> sc, rc;
    for (size_t i = 0; i < n; ++i) {
      sc.push_back(elems(inputs[i]));
      rc.push_back(elems(outputs[i]));
    }
    w.requests.push_back(
        comm_->ialltoallv(src.data_ptr(), sc, displacements(sc), dst.data_ptr(), rc, displacements(rc), to_mpcomm(src, op)));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const std::string op = "send";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  return launch(c10d::OpType::SEND, "send", {}, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], false);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->isend(t.data_ptr(), elems(t), to_mpcomm(t, op), dst, tag));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  const std::string op = "recv";
  check_list(tensors, 1, op, "the tensor list");
  check_tensor(tensors[0], op, *comm_);
  return launch(c10d::OpType::RECV, "recv", tensors, [&](MpcommWork& w) {
    at::Tensor t = contiguous(w, tensors[0], true);
    w.keep.push_back(tensors[0]);
    w.requests.push_back(comm_->irecv(t.data_ptr(), elems(t), to_mpcomm(t, op), src, tag));
  });
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::recvAnysource(std::vector<at::Tensor>&, int) {
  refuse("recv", "receiving from any source is not supported by mpcomm: name the source rank (src=...)");
}

std::vector<double> ProcessGroupMpcomm::time_from_cpp(const std::string& op, size_t count, int iters, bool barrier) {
  const int n = getSize(), r = getRank();
  const size_t blocks = op == "alltoall" ? static_cast<size_t>(n) : 1;
  std::vector<float> a(count * blocks, 1.0f), b(count * blocks, 0.0f);
  std::vector<double> secs;
  std::function<void()> call;
  if (op == "allreduce")
    call = [&] { comm_->allreduce(a.data(), a.data(), count, DataType::float32, ReduceOp::sum); };
  else if (op == "broadcast")
    call = [&] { comm_->broadcast(a.data(), count, DataType::float32, 0); };
  else if (op == "alltoall")
    call = [&] { comm_->alltoall(a.data(), b.data(), count, DataType::float32); };
  else if (op == "iallreduce")  // the non-blocking call and its wait, as the process group makes it
    call = [&] { comm_->iallreduce(a.data(), a.data(), count, DataType::float32, ReduceOp::sum).wait(); };
  else if (op == "sendrecv")
    call = [&] {
      if (n == 1) return;
      Request in = comm_->irecv(b.data(), count, DataType::float32, (r + n - 1) % n, 9);
      Request out = comm_->isend(a.data(), count, DataType::float32, (r + 1) % n, 9);
      in.wait();
      out.wait();
    };
  else
    refuse("time_from_cpp", "unknown op '" + op + "' (allreduce, iallreduce, broadcast, alltoall, sendrecv)");
  std::lock_guard<std::mutex> g(issue_mu_);
  for (int i = 0; i < iters; ++i) {
    if (barrier) comm_->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return secs;
}

ProcessGroupMpcomm::Works ProcessGroupMpcomm::barrier(const c10d::BarrierOptions&) {
  return launch(c10d::OpType::BARRIER, "barrier", {}, [&](MpcommWork& w) { w.requests.push_back(comm_->ibarrier()); });
}

}  // namespace mpcomm::torch_backend
