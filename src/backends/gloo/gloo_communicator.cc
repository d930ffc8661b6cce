#include "backends/gloo/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "backends/gloo/p2p_request.h"
#include "bootstrap/abort_record.h"
#include "bootstrap/peer_directory.h"
#include "core/op.h"
#include "device/device.h"
#include "kernels/reduce.h"
#include "log/log.h"

namespace mpcomm::gloo_backend {

namespace {

// ---- our Store seen through Gloo's store interface ----------------------------------------------------

class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<mpcomm::Store> s, Millis timeout) : s_(std::move(s)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes b = s_->get(key, timeout_);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<mpcomm::Store> s_;
  Millis timeout_;
};

// ---- reduction functions ------------------------------------------------------------------------------

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Gloo has no bitwise reductions: mpcomm's kernels (integer types only; FrontDoor::validate refuses others).
template <ReduceOp Op, DataType Dt>
void bitwise_fn(void* c, const void* a, const void* b, size_t n) {
  const void* srcs[2] = {a, b};
  reduce_into(c, srcs, 2, n, Dt, Op);
}

template <class T>
ReduceFn gloo_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return &::gloo::sum<T>;
    case ReduceOp::prod: return &::gloo::product<T>;
    case ReduceOp::min: return &::gloo::min<T>;
    case ReduceOp::max: return &::gloo::max<T>;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor: break;
  }
  return nullptr;
}

template <DataType Dt>
ReduceFn bitwise(ReduceOp op) {
  switch (op) {
    case ReduceOp::band: return &bitwise_fn<ReduceOp::band, Dt>;
    case ReduceOp::bor: return &bitwise_fn<ReduceOp::bor, Dt>;
    case ReduceOp::bxor: return &bitwise_fn<ReduceOp::bxor, Dt>;
    default: return nullptr;
  }
}

// bfloat16 has no Gloo type: reduce through mpcomm's kernels, which accumulate in float32.
template <ReduceOp Op>
void bf16_fn(void* c, const void* a, const void* b, size_t n) {
  const void* srcs[2] = {a, b};
  reduce_into(c, srcs, 2, n, DataType::bfloat16, Op);
}

ReduceFn reduce_fn(DataType dt, ReduceOp op) {
  const bool bits = is_bitwise(op);
  if (bits && is_floating(dt))
    throw Internal("mpcomm: gloo: no " + std::string(to_string(op)) + " for " + std::string(to_string(dt)));
  switch (dt) {
    case DataType::int8: return bits ? bitwise<DataType::int8>(op) : gloo_fn<int8_t>(op);
    case DataType::uint8: return bits ? bitwise<DataType::uint8>(op) : gloo_fn<uint8_t>(op);
    case DataType::int32: return bits ? bitwise<DataType::int32>(op) : gloo_fn<int32_t>(op);
    case DataType::int64: return bits ? bitwise<DataType::int64>(op) : gloo_fn<int64_t>(op);
    case DataType::float16: return gloo_fn<::gloo::float16>(op);
    case DataType::float32: return gloo_fn<float>(op);
    case DataType::float64: return gloo_fn<double>(op);
    case DataType::bfloat16:
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg: return &bf16_fn<ReduceOp::sum>;
        case ReduceOp::prod: return &bf16_fn<ReduceOp::prod>;
        case ReduceOp::min: return &bf16_fn<ReduceOp::min>;
        case ReduceOp::max: return &bf16_fn<ReduceOp::max>;
        case ReduceOp::band:
        case ReduceOp::bor:
        case ReduceOp::bxor: break;
      }
  }
  throw Internal("mpcomm: gloo: no reduce function for " + std::string(to_string(dt)));
}

// Gloo's typed setters only need the element size; route every dtype to a same-size type.
template <class F>
void with_elem_type(DataType dt, F&& f) {
  switch (dtype_size(dt)) {
    case 1: return f(static_cast<uint8_t*>(nullptr));
    case 2: return f(static_cast<uint16_t*>(nullptr));
    case 4: return f(static_cast<uint32_t*>(nullptr));
    default: return f(static_cast<uint64_t*>(nullptr));
  }
}

// What each op runs, for the flight recorder.
const char* gloo_algorithm(OpKind k) {
  switch (k) {
    case OpKind::allreduce: return "gloo ring";
    case OpKind::broadcast: return "gloo::broadcast";
    case OpKind::reduce: return "gloo::reduce";
    case OpKind::allgather: return "gloo::allgather";
    case OpKind::reduce_scatter: return "gloo ring allreduce, own block";
    case OpKind::gather: return "gloo::gather";
    case OpKind::scatter: return "gloo::scatter";
    case OpKind::alltoall: return "gloo::alltoall";
    case OpKind::barrier: return "gloo::barrier";
    case OpKind::alltoallv: return "gloo unbound buffers, every pair at once";
    case OpKind::allgatherv: return "gloo unbound buffers, ring";
    default: return "gloo";
  }
}

constexpr uint8_t kP2PSlotPrefix = 0x20;  // above Gloo's collective prefixes (0x01..0x08)
constexpr uint8_t kAlltoallvSlotPrefix = 0x21;
constexpr uint8_t kAllgathervSlotPrefix = 0x22;

class GlooBackend;

class GlooBackend final : public detail::Backend {
 public:
  GlooBackend(int rank, int size, Topology topo, Options opts, std::shared_ptr<Store> store,
              std::shared_ptr<::gloo::Context> ctx)
      : Backend("gloo", rank, size, std::move(topo), std::move(opts), store),
        ctx_(std::move(ctx)),
        abort_watch_(store, std::chrono::milliseconds(0), "gloo rank " + std::to_string(rank),
                     /*job_wide=*/options().elastic <= 0) {}

  template <class F>
  void guarded(const detail::Op& op, F&& f) {
    gloo_backend::guarded(*this, op, std::forward<F>(f));
  }

  Millis timeout() const { return options().timeout; }

  void run(const detail::Op& op) override {
    op.algorithm = gloo_algorithm(op.kind);
    guarded(op, [&] { dispatch(op); });
    if (op.redop == ReduceOp::avg && op.reduces()) finish_avg(op);
  }

  // test() costs a thread here (P2PRequest): the progress thread leaves Gloo's requests to their waits.
  bool cheap_test() const override { return false; }

  std::shared_ptr<detail::RequestState> start(const detail::Op& op) override {
    op.algorithm = "unbound buffers";
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
    const uint64_t slot = ::gloo::Slot::build(kP2PSlotPrefix, static_cast<uint32_t>(op.tag));
    guarded(op, [&] {
      if (op.kind == OpKind::send) {
        buf = ctx_->createUnboundBuffer(const_cast<void*>(op.send), op.bytes());
        buf->send(op.peer, slot);
      } else if (op.peer == kAnySource) {
        std::vector<int> others;
        for (int r = 0; r < size(); ++r)
          if (r != rank()) others.push_back(r);
        buf = ctx_->createUnboundBuffer(op.recv, op.bytes());
        buf->recv(others, slot);
      } else {
        buf = ctx_->createUnboundBuffer(op.recv, op.bytes());
        buf->recv(op.peer, slot);
      }
    });
    return std::make_shared<P2PRequest>(this, std::move(buf), op);
  }

  void abort(ErrorCode code, const std::string& reason) override {
    {
      std::lock_guard<std::mutex> g(abort_mu_);
      if (!abort_.empty()) return;
      abort_ = reason;
    }
    // A mismatch is found by MPCOMM_CHECK's exchange on every rank alike; telling the others (and
    // closing connections under a peer still finishing that exchange) would only turn its Mismatch
    // into a PeerFailure.
    if (code == ErrorCode::mismatch) return;
    // Tell the job (mpcomm launch and store-polling backends watch this key) and drop our
    // connections so that peers blocked on us fail now rather than at their timeout.
    abort_watch_.publish(reason);
    try {
      ctx_->closeConnections();
    } catch (...) {
    }
  }
 private:
  std::vector<char>& scratch(size_t n) {
    if (scratch_.size() < n) scratch_.resize(n);
    return scratch_;
  }

  void finish_avg(const detail::Op& op) {
    if (op.kind == OpKind::allreduce) divide_by(op.recv, op.count, op.dtype, size());
    if (op.kind == OpKind::reduce && rank() == op.root) divide_by(op.recv, op.count, op.dtype, size());
    if (op.kind == OpKind::reduce_scatter) divide_by(op.recv, op.count, op.dtype, size());
  }

  void dispatch(const detail::Op& op) {
    const uint32_t tag = static_cast<uint32_t>(op.seq);
    const size_t es = dtype_size(op.dtype), bytes = op.bytes(), n = static_cast<size_t>(size());
    if (op.kind == OpKind::alltoallv) return alltoallv(op);
    if (op.kind == OpKind::allgatherv) return allgatherv(op);
    if (op.kind != OpKind::barrier && op.count == 0) {
      // Gloo rejects empty buffers in some ops; an empty collective still synchronises nothing.
      return;
    }
    switch (op.kind) {
      case OpKind::allreduce: {
        // Gloo's ring allreduce (bcube for large counts is not used: PyTorch's default is ring).
        if (op.send != op.recv) std::memcpy(op.recv, op.send, bytes);
        ::gloo::AllreduceOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setOutput(static_cast<T*>(op.recv), op.count);
        });
        o.setReduceFunction(reduce_fn(op.dtype, op.redop));
        o.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::allreduce(o);
        return;
      }
      case OpKind::broadcast: {
        ::gloo::BroadcastOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setOutput(static_cast<T*>(op.recv), op.count);
        });
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::broadcast(o);
        return;
      }
      case OpKind::reduce: {
        // Gloo's reduce uses the output as its working buffer on every rank.
        const bool root = rank() == op.root;
        char* out = root ? static_cast<char*>(op.recv) : scratch(bytes).data();
        if (op.send != out) std::memcpy(out, op.send, bytes);
        ::gloo::ReduceOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setOutput(reinterpret_cast<T*>(out), op.count);
        });
        o.setRoot(op.root);
        o.setReduceFunction(reduce_fn(op.dtype, op.redop));
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::reduce(o);
        return;
      }
      case OpKind::allgather: {
        // In place (send inside recv): hand Gloo a copy so that input and output never alias.
        const char* in = static_cast<const char*>(op.send);
        if (in == static_cast<char*>(op.recv) + static_cast<size_t>(rank()) * bytes) {
          std::memcpy(scratch(bytes).data(), in, bytes);
          in = scratch_.data();
        }
        ::gloo::AllgatherOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setInput(const_cast<T*>(reinterpret_cast<const T*>(in)), op.count);
          o.setOutput(static_cast<T*>(op.recv), op.count * n);
        });
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::allgather(o);
        return;
      }
      case OpKind::reduce_scatter: {
        // Composed: this Gloo's reduce-scatter is a legacy algorithm for power-of-two groups only, so
        // allreduce the whole n-block input (ring) and keep block `rank`. Moves n× the bytes of a
        // dedicated reduce-scatter; the README's capability table says so.
        char* all = scratch(bytes * n).data();
        std::memcpy(all, op.send, bytes * n);
        ::gloo::AllreduceOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setOutput(reinterpret_cast<T*>(all), op.count * n);
        });
        o.setReduceFunction(reduce_fn(op.dtype, op.redop));
        o.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::allreduce(o);
        std::memmove(op.recv, all + static_cast<size_t>(rank()) * bytes, bytes);
        return;
      }
      case OpKind::gather: {
        const char* in = static_cast<const char*>(op.send);
        if (rank() == op.root && in == static_cast<char*>(op.recv) + static_cast<size_t>(rank()) * bytes) {
          std::memcpy(scratch(bytes).data(), in, bytes);
          in = scratch_.data();
        }
        ::gloo::GatherOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setInput(const_cast<T*>(reinterpret_cast<const T*>(in)), op.count);
          if (rank() == op.root) o.setOutput(static_cast<T*>(op.recv), op.count * n);
        });
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::gather(o);
        return;
      }
      case OpKind::scatter: {
        char* out = static_cast<char*>(op.recv);
        const bool aliased = rank() == op.root && out == static_cast<const char*>(op.send) + static_cast<size_t>(rank()) * bytes;
        if (aliased) out = scratch(bytes).data();
        ::gloo::ScatterOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          if (rank() == op.root) {
            std::vector<T*> ins(n);
            for (size_t r = 0; r < n; ++r)
              ins[r] = const_cast<T*>(reinterpret_cast<const T*>(static_cast<const char*>(op.send) + r * bytes));
            o.setInputs(ins, op.count);
          }
          o.setOutput(reinterpret_cast<T*>(out), op.count);
        });
        o.setRoot(op.root);
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::scatter(o);
        return;  // aliased: the root's block is already in place
      }
      case OpKind::alltoall: {
        const char* in = static_cast<const char*>(op.send);
        if (in == op.recv) {
          std::memcpy(scratch(bytes * n).data(), in, bytes * n);
          in = scratch_.data();
        }
        ::gloo::AlltoallOptions o(ctx_);
        with_elem_type(op.dtype, [&](auto* t) {
          using T = std::remove_pointer_t<decltype(t)>;
          o.setInput(const_cast<T*>(reinterpret_cast<const T*>(in)), op.count * n);
          o.setOutput(static_cast<T*>(op.recv), op.count * n);
        });
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::alltoall(o);
        return;
      }
      case OpKind::barrier: {
        ::gloo::BarrierOptions o(ctx_);
        o.setTag(tag);
        o.setTimeout(timeout());
        ::gloo::barrier(o);
        return;
      }
      default: throw Internal("mpcomm: gloo: unexpected op " + std::string(to_string(op.kind)));
    }
    (void)es;
  }

  // The uneven ops, on Gloo's unbound buffers as gloo::alltoallv and gloo::allgatherv use them, but with
  // displacements: those two take packed blocks only (each block's offset the sum of the counts before
  // it). The front door has checked every rank's counts against the others' first (FrontDoor::verify_counts):
  // Gloo would take a shorter message for a longer receive without a word, and fail a longer one on its
  // own thread.
  std::unique_ptr<::gloo::transport::UnboundBuffer> unbound(const void* p, size_t bytes) {
    return ctx_->createUnboundBuffer(p != nullptr ? const_cast<void*>(p) : &empty_, bytes);
  }
  void waited(bool ok, const detail::Op& op, const char* what) {
    if (!ok) throw PeerFailure("mpcomm: " + describe(op) + ": gloo: the wait for a " + what + " was aborted");
  }

  // Own block copied; every block sent to its rank and every rank's received at once; then every wait.
  void alltoallv(const detail::Op& op) {
    const detail::VCounts& v = *op.v;
    const size_t es = dtype_size(op.dtype);
    const int n = size();
    const auto me = static_cast<size_t>(rank());
    const detail::BufferSpans spans = detail::buffer_spans(op, rank(), n);
    if (const size_t own = v.send_counts[me] * es; own > 0)
      std::memcpy(static_cast<char*>(op.recv) + v.recv_displs[me] * es,
                  static_cast<const char*>(op.send) + v.send_displs[me] * es, own);
    if (n == 1) return;
    auto in = unbound(op.send, spans.send_n);
    auto out = unbound(op.recv, spans.recv_n);
    const auto slot = ::gloo::Slot::build(kAlltoallvSlotPrefix, static_cast<uint32_t>(op.seq));
    for (int i = 1; i < n; ++i) {
      const auto to = (me + static_cast<size_t>(i)) % static_cast<size_t>(n);
      const auto from = (me + static_cast<size_t>(n - i)) % static_cast<size_t>(n);
      // An empty block sits at offset 0: its displacement may lie past the buffer's extent.
      in->send(static_cast<int>(to), slot, v.send_counts[to] > 0 ? v.send_displs[to] * es : 0, v.send_counts[to] * es);
      out->recv(static_cast<int>(from), slot, v.recv_counts[from] > 0 ? v.recv_displs[from] * es : 0,
                v.recv_counts[from] * es);
    }
    for (int i = 1; i < n; ++i) {
      waited(in->waitSend(timeout()), op, "send");
      waited(out->waitRecv(timeout()), op, "receive");
    }
  }

  // Own block placed (unless in place); then n-1 ring steps, each passing on the block received last.
  void allgatherv(const detail::Op& op) {
    const detail::VCounts& v = *op.v;
    const size_t es = dtype_size(op.dtype);
    const int n = size(), me = rank();
    char* out = static_cast<char*>(op.recv);
    const auto len = [&](int q) { return v.recv_counts[static_cast<size_t>(q)] * es; };
    // An empty block sits at offset 0: its displacement may lie past the buffer's extent.
    const auto at = [&](int q) { return len(q) > 0 ? v.recv_displs[static_cast<size_t>(q)] * es : 0; };
    if (len(me) > 0 && op.send != out + at(me)) std::memcpy(out + at(me), op.send, len(me));
    if (n == 1) return;
    auto buf = unbound(out, detail::buffer_spans(op, me, n).recv_n);
    const auto slot = ::gloo::Slot::build(kAllgathervSlotPrefix, static_cast<uint32_t>(op.seq));
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    for (int s = 0; s < n - 1; ++s) {
      const int sb = (me - s + n) % n, rb = (me - s - 1 + 2 * n) % n;
      buf->send(right, slot, at(sb), len(sb));
      buf->recv(left, slot, at(rb), len(rb));
      waited(buf->waitSend(timeout()), op, "send");
      waited(buf->waitRecv(timeout()), op, "receive");
    }
  }

  std::shared_ptr<::gloo::Context> ctx_;
  char empty_ = 0;  // what an unbound buffer of no bytes points at
  std::vector<char> scratch_;
  std::mutex abort_mu_;
  std::string abort_;
  AbortWatch abort_watch_;
};

}  // namespace

std::unique_ptr<detail::Backend> create_gloo(std::shared_ptr<Store> store, int rank, int size, const Options& in) {
  Options opts = in.resolved();
  // cuda buffers are staged through host memory by the front door (core/device_staging.h).
  if (opts.device.kind == Device::cuda) device::require_cuda("gloo on " + to_string(opts.device));
  const auto deadline = net::deadline_after(opts.timeout);
  const std::string who = "gloo communicator setup on rank " + std::to_string(rank) + " of " + std::to_string(size);
  PeerDirectory dir = exchange_peers(*store, rank, size, opts.host_id, opts.bind_addr, deadline, who);

  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would kill this process with
  // SIGPIPE instead of letting the write fail. Ignore SIGPIPE unless the program chose a handler.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);

  // Gloo's TCP transport for every pair, as it is used for real; its own rendezvous through our store.
  ::gloo::transport::tcp::attr attr;
  attr.hostname = opts.bind_addr;
  auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(opts.timeout);
  try {
    auto dev = ::gloo::transport::tcp::CreateDevice(attr);
    StoreAdapter adapter(std::make_shared<PrefixStore>("gloo", store), opts.timeout);
    ctx->connectFullMesh(adapter, dev);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerFailure("mpcomm: " + who + ": gloo could not connect its full mesh: " + e.what());
  }
  return std::make_unique<GlooBackend>(rank, size, std::move(dir.topology), std::move(opts), std::move(store),
                                            std::move(ctx));
}

}  // namespace mpcomm::gloo_backend
