#include "parallel/trainer.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "mpcomm/error.h"
#include "mpcomm/trace.h"
#include "parallel/checkpoint.h"
#include "parallel/kernels.h"

namespace mpcomm::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tags of the trainer's point-to-point traffic (checkpoint.cc uses 4).
constexpr int kTagActivation = 1, kTagGradient = 2, kTagEmbedding = 3;

[[noreturn]] void bad(const std::string& what) { throw InvalidArgument("mpcomm train: " + what); }

}  // namespace

std::string default_corpus() { return "/usr/share/common-licenses/GPL-3"; }

// ---------------------------------------------------------------------------------------------------
// configuration

ResolvedRun resolve(const TrainConfig& in, int world_size) {
  ResolvedRun r;
  r.cfg = in;
  TrainConfig& c = r.cfg;
  const auto& d = c.dims;
  if (d.tp < 1 || d.pp < 1 || d.dp < 1) bad("--tp, --pp and --dp must be at least 1");
  if (d.world() != world_size)
    bad("--tp " + std::to_string(d.tp) + " × --pp " + std::to_string(d.pp) + " × --dp " + std::to_string(d.dp) +
        " = " + std::to_string(d.world()) + " ranks, but the job has " + std::to_string(world_size));
  parse_schedule(c.schedule);
  if (c.micro_batches < 1) bad("--micro-batches must be at least 1");
  if (c.steps < 0) bad("--steps must not be negative");
  if (c.seq < 1) bad("--seq must be at least 1");
  if (c.batch < 1) bad("--batch must be at least 1");
  if (c.batch % (c.micro_batches * d.dp) != 0)
    bad("--batch " + std::to_string(c.batch) + " is not divisible by --micro-batches " +
        std::to_string(c.micro_batches) + " × --dp " + std::to_string(d.dp));
  if (!(c.adamw.lr >= 0) || !(c.adamw.eps >= 0) || !(c.adamw.weight_decay >= 0) || !(c.adamw.beta1 >= 0) ||
      !(c.adamw.beta1 < 1) || !(c.adamw.beta2 >= 0) || !(c.adamw.beta2 < 1))
    bad("AdamW wants --lr, --eps, --weight-decay >= 0 and --beta1, --beta2 in [0, 1)");
  if (!(c.bucket_mb > 0)) bad("--bucket-mb must be positive");
  parse_wire(c.comm_dtype);
  if (c.zero != 0 && c.zero != 1)
    bad("--zero " + std::to_string(c.zero) + ": stage 0 or 1 (the optimizer state sharded)");
  if (c.sequence_parallel && d.tp == 1)
    bad("--sequence-parallel shards the tokens over the tensor-parallel ranks, and --tp is 1: give --tp 2 or more");
  if (c.sequence_parallel && (c.batch / (d.dp * c.micro_batches) * c.seq) % d.tp != 0)
    bad("--sequence-parallel: a micro-batch's " + std::to_string(c.batch / (d.dp * c.micro_batches) * c.seq) +
        " tokens (--batch / (--dp × --micro-batches) × --seq) do not split evenly over --tp " + std::to_string(d.tp));
  if (c.zero == 1 && d.dp == 1)
    bad("--zero 1 shards the optimizer over the data-parallel ranks, and --dp is 1: give --dp 2 or more");

  // data
  if (!c.data.empty() && !c.tokens.empty()) bad("give --data or --tokens, not both");
  if (c.tokens.empty()) {
    if (c.data.empty()) c.data = default_corpus();
    r.data = std::make_shared<TokenData>(TokenData::from_bytes(c.data));
  } else {
    r.data = std::make_shared<TokenData>(TokenData::from_uint16(c.tokens));
  }

  // model
  GPTConfig& m = r.model;
  if (!c.init_from.empty()) {
    r.checkpoint = std::make_shared<SafetensorsFile>(c.init_from);
    m = checkpoint_config(*r.checkpoint);
    auto agree = [&](int flag, int have, const char* name) {
      if (flag != 0 && flag != have)
        bad(std::string("--") + name + " " + std::to_string(flag) + " contradicts the checkpoint " + c.init_from +
            " (" + std::to_string(have) + ")");
    };
    agree(c.layers, m.layers, "layers");
    agree(c.hidden, m.hidden, "hidden");
    if (m.heads != 0) agree(c.heads, m.heads, "heads");
    if (m.heads == 0) m.heads = c.heads;
    if (m.heads == 0) bad("the checkpoint " + c.init_from + " does not say its heads (metadata n_head): give --heads");
    if (c.vocab != 0) agree(c.vocab, m.vocab, "vocab");
  } else {
    m.layers = c.layers ? c.layers : 4;
    m.hidden = c.hidden ? c.hidden : 128;
    m.heads = c.heads ? c.heads : 4;
    m.vocab = c.vocab ? c.vocab : r.data->vocab_needed();
    m.positions = c.seq;
  }
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1) bad("--layers, --hidden and --heads must be at least 1");
  if (m.hidden % m.heads != 0)
    bad("--hidden " + std::to_string(m.hidden) + " is not divisible by --heads " + std::to_string(m.heads));
  if (m.heads % d.tp != 0)
    bad("--heads " + std::to_string(m.heads) + " is not divisible by --tp " + std::to_string(d.tp));
  if (m.layers < d.pp)
    bad(std::to_string(m.layers) + " layers cannot fill --pp " + std::to_string(d.pp) + " pipeline stages");
  if (c.seq > m.positions)
    bad("--seq " + std::to_string(c.seq) + " is longer than the model's " + std::to_string(m.positions) + " positions");
  if (r.data->vocab_needed() > m.vocab)
    bad("training data " + r.data->path() + " has token id " + std::to_string(r.data->vocab_needed() - 1) +
        ", outside the model's vocabulary of " + std::to_string(m.vocab));
  if (r.data->size() < static_cast<size_t>(c.seq) + 2)
    bad("training data " + r.data->path() + " has " + std::to_string(r.data->size()) + " tokens; --seq " +
        std::to_string(c.seq) + " needs at least " + std::to_string(c.seq + 2));
  if (r.checkpoint) check_checkpoint(*r.checkpoint, m);
  c.layers = m.layers, c.hidden = m.hidden, c.heads = m.heads;
  return r;
}

// ---------------------------------------------------------------------------------------------------
// stats

std::vector<double> RankStats::to_vector() const {
  return {tp.seconds,
          double(tp.bytes),
          double(tp.calls),
          pp.seconds,
          double(pp.bytes),
          double(pp.calls),
          dp.seconds,
          double(dp.bytes),
          double(dp.calls),
          embedding.seconds,
          double(embedding.bytes),
          double(embedding.calls),
          pp_wait_s,
          step_s,
          optimizer_bytes,
          params,
          tp_spent,
          pp_spent,
          dp_spent};
}

RankStats RankStats::from_vector(const double* v) {
  RankStats s;
  auto meter = [](const double* p) { return CommMeter{p[0], uint64_t(p[1]), uint64_t(p[2])}; };
  s.tp = meter(v), s.pp = meter(v + 3), s.dp = meter(v + 6), s.embedding = meter(v + 9);
  s.pp_wait_s = v[12], s.step_s = v[13], s.optimizer_bytes = v[14], s.params = v[15];
  s.tp_spent = v[16], s.pp_spent = v[17], s.dp_spent = v[18];
  return s;
}

// ---------------------------------------------------------------------------------------------------
// the trainer

namespace {

size_t round_up(size_t n, size_t k) { return (n + k - 1) / k * k; }

// The flat buffers' length: under ZeRO a multiple of dp, so that every bucket splits evenly.
size_t buffer_length(const ShardLayout& layout, const TrainConfig& c) {
  return c.zero ? round_up(layout.total(), static_cast<size_t>(c.dims.dp)) : layout.total();
}

std::vector<std::pair<size_t, size_t>> make_buckets(size_t n, const TrainConfig& c) {
  size_t bucket = std::max<size_t>(1, static_cast<size_t>(c.bucket_mb * 1048576.0 / sizeof(float)));
  if (c.zero) bucket = round_up(bucket, static_cast<size_t>(c.dims.dp));
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t end = n; end > 0;) {
    const size_t begin = end > bucket ? end - bucket : 0;
    out.push_back({begin, end});
    end = begin;
  }
  return out;
}

}  // namespace

Trainer::Trainer(const ResolvedRun& run, ParallelGroups& groups)
    : run_(run),
      g_(groups),
      layout_(run.model, groups.dims.tp, groups.me.tp, groups.dims.pp, groups.me.pp),
      params_(buffer_length(layout_, run.cfg)),
      grads_(params_.size()),
      buckets_(make_buckets(params_.size(), run.cfg)),
      adamw_(run.cfg.zero ? params_.size() / static_cast<size_t>(groups.dims.dp) : params_.size(), run.cfg.adamw),
      tp_(groups.tp.get()) {
  const auto& c = run_.cfg;
  wire_.type = parse_wire(c.comm_dtype);
  tp_.wire = wire_;
  stats_.optimizer_bytes = static_cast<double>(adamw_.state_bytes());
  stats_.params = static_cast<double>(layout_.total());
  micro_seqs_ = static_cast<size_t>(c.batch / (c.dims.dp * c.micro_batches));
  if (run_.checkpoint)
    load_shard(*run_.checkpoint, layout_, params_.data());
  else
    init_params(layout_, c.seed, params_.data());
  stage_ = std::make_unique<GPTStage>(layout_, tp_, params_.data(), grads_.data(), micro_seqs_,
                                      static_cast<size_t>(c.seq), c.sequence_parallel);
  schedule_ = pipeline_schedule(parse_schedule(c.schedule), g_.me.pp, g_.dims.pp, c.micro_batches);
}

Trainer::~Trainer() = default;

void Trainer::run_schedule(int k, double* loss_sum) {
  const auto& c = run_.cfg;
  // N: the micro-batch's tokens; R: the rows of the activations the stages pass (N/tp with sequence parallelism).
  const size_t T = static_cast<size_t>(c.seq), N = micro_seqs_ * T, C = static_cast<size_t>(run_.model.hidden);
  const size_t R = stage_->rows();
  const size_t B = static_cast<size_t>(c.batch);
  const float loss_scale = 1.0f / static_cast<float>(B * T);
  const int prev = g_.me.pp - 1, next = g_.me.pp + 1;
  Communicator* pp = g_.pp.get();
  std::vector<int32_t> inputs(N), targets(N);
  std::map<int, std::vector<float>> received, sending;  // per micro-batch: [N,C]
  std::map<int, std::vector<float>> received_grad, sending_grad;
  std::vector<Request> sends;
  const bool traced = trace::enabled(*g_.world);
  const int last_micro = c.micro_batches - 1;  // every schedule runs the backwards in micro-batch order
  const std::function<void(size_t)> on_final = [this](size_t frontier) { launch_buckets(frontier); };

  // Every receive of the step is posted at its start (messages of one tag from one peer match in order), so
  // that a neighbour's send completes as soon as it is made; a recv action waits for its own.
  // bfloat16 on the wire (wire.h): what arrives lands in staging and is widened by recv(); what leaves is
  // rounded into staging that lives until the step's sends are waited for.
  std::map<int, std::vector<uint16_t>> staged_fwd, staged_bwd;
  std::vector<std::vector<uint16_t>> send_staging;
  send_staging.reserve(2 * static_cast<size_t>(c.micro_batches));  // no reallocation while sends are in flight
  std::map<int, Request> posted_fwd, posted_bwd;
  if (g_.dims.pp > 1) {
    auto t0 = Clock::now();
    for (int m = 0; m < c.micro_batches; ++m) {
      if (prev >= 0) {
        received[m].resize(R * C);
        posted_fwd[m] = wire_.irecv(*pp, received[m].data(), R * C, prev, kTagActivation, staged_fwd[m]);
      }
      if (next < g_.dims.pp) {
        received_grad[m].resize(R * C);
        posted_bwd[m] = wire_.irecv(*pp, received_grad[m].data(), R * C, next, kTagGradient, staged_bwd[m]);
      }
    }
    stats_.pp.seconds += since(t0);
  }
  auto recv = [&](std::map<int, Request>& posted, std::map<int, std::vector<uint16_t>>& staged,
                  std::map<int, std::vector<float>>& into, int m) {
    auto t0 = Clock::now();
    posted.at(m).wait();
    double s = since(t0);
    wire_.finish_recv(into.at(m).data(), R * C, staged[m]);
    stats_.pp.seconds += s, stats_.pp_wait_s += s, stats_.pp.bytes += wire_.bytes(R * C), stats_.pp.calls++;
  };
  auto send = [&](const std::vector<float>& buf, int peer, int tag) {
    auto t0 = Clock::now();
    send_staging.emplace_back();
    sends.push_back(wire_.isend(*pp, buf.data(), R * C, peer, tag, send_staging.back()));
    stats_.pp.seconds += since(t0), stats_.pp.bytes += wire_.bytes(R * C), stats_.pp.calls++;
  };

  for (const Action& a : schedule_) {
    const int m = a.micro;
    switch (a.kind) {
      case ActionKind::recv_forward:
        recv(posted_fwd, staged_fwd, received, m);
        break;
      case ActionKind::forward: {
        trace::Span span(*g_.world, "compute", "forward", traced ? "\"micro\":" + std::to_string(m) : "");
        size_t first = static_cast<size_t>(g_.me.dp) * (B / static_cast<size_t>(c.dims.dp)) +
                       static_cast<size_t>(m) * micro_seqs_;
        run_.data->batch(static_cast<uint64_t>(k), first, micro_seqs_, B, T, inputs.data(), targets.data());
        const float* in = received.count(m) ? received[m].data() : nullptr;
        const float* out = stage_->forward(m, in, inputs.data(), targets.data(), loss_sum);
        received.erase(m);
        if (out != nullptr) sending[m].assign(out, out + R * C);
        break;
      }
      case ActionKind::send_forward: send(sending[m], next, kTagActivation); break;
      case ActionKind::recv_backward:
        recv(posted_bwd, staged_bwd, received_grad, m);
        break;
      case ActionKind::backward: {
        trace::Span span(*g_.world, "compute", "backward", traced ? "\"micro\":" + std::to_string(m) : "");
        const float* dout = received_grad.count(m) ? received_grad[m].data() : nullptr;
        const float* din = stage_->backward(m, dout, loss_scale, c.overlap && m == last_micro ? &on_final : nullptr);
        received_grad.erase(m);
        if (din != nullptr) sending_grad[m].assign(din, din + R * C);
        break;
      }
      case ActionKind::send_backward: send(sending_grad[m], prev, kTagGradient); break;
    }
  }
  auto t0 = Clock::now();
  for (auto& r : sends) r.wait();
  stats_.pp.seconds += since(t0);
}

void Trainer::launch_buckets(size_t frontier) {
  if (g_.dims.dp == 1) return;
  const size_t dp = static_cast<size_t>(g_.dims.dp), me = static_cast<size_t>(g_.me.dp);
  auto t0 = Clock::now();
  for (; launched_ < buckets_.size() && buckets_[launched_].first >= frontier; ++launched_) {
    const auto [begin, end] = buckets_[launched_];
    if (tied_pending_ && begin < layout_.at("wte.weight").offset + layout_.at("wte.weight").numel) break;
    float* bucket = grads_.data() + begin;
    BucketOp op;
    op.begin = begin, op.end = end;
    if (wire_.bf16()) {
      // bfloat16 (wire.h): the all-to-all of the bucket's blocks now, the float32 sums and (all-reduce) the
      // all-gather of the rounded sums when the bucket is finished.
      op.block = (end - begin + dp - 1) / dp;
      op.out.assign(dp * op.block, 0);
      op.in.resize(dp * op.block);
      to_bf16(bucket, op.out.data(), end - begin);
      op.request = g_.dp->ialltoall(op.out.data(), op.in.data(), op.block, DataType::bfloat16);
    } else if (run_.cfg.zero) {  // the sum lands, reduce-scattered in place, in this rank's 1/dp: the piece it updates
      const size_t piece = (end - begin) / dp;
      op.request = g_.dp->ireduce_scatter(bucket, bucket + me * piece, piece, DataType::float32, ReduceOp::sum);
    } else {
      op.request = g_.dp->iallreduce(bucket, bucket, end - begin, DataType::float32, ReduceOp::sum);
    }
    bucket_ops_.push_back(std::move(op));
    stats_.dp.bytes += wire_.bytes(end - begin), stats_.dp.calls++;
  }
  stats_.dp.seconds += since(t0);
}

void Trainer::finish_buckets() {
  owned_.clear();
  if (g_.dims.dp == 1) {
    owned_.push_back({0, grads_.size()});
    return;
  }
  const size_t dp = static_cast<size_t>(g_.dims.dp), me = static_cast<size_t>(g_.me.dp);
  auto t0 = Clock::now();
  for (auto& op : bucket_ops_) {
    op.request.wait();
    if (!wire_.bf16()) continue;
    std::vector<float> sum(op.block, 0.0f);  // this rank's block, summed in float32 in rank order
    for (size_t r = 0; r < dp; ++r) {
      std::vector<float> part(op.block);
      from_bf16(op.in.data() + r * op.block, part.data(), op.block);
      for (size_t i = 0; i < op.block; ++i) sum[i] += part[i];
    }
    if (run_.cfg.zero) {  // the piece stays here, in float32: the optimizer's
      std::copy(sum.begin(), sum.end(), grads_.begin() + static_cast<long>(op.begin + me * op.block));
    } else {
      std::vector<uint16_t> rounded(op.block), all(dp * op.block);
      to_bf16(sum.data(), rounded.data(), op.block);
      g_.dp->allgather(rounded.data(), all.data(), op.block, DataType::bfloat16);
      from_bf16(all.data(), grads_.data() + op.begin, op.end - op.begin);
    }
  }
  stats_.dp.seconds += since(t0);
  bucket_ops_.clear();
  launched_ = 0;
  for (auto [begin, end] : buckets_) {
    const size_t piece = run_.cfg.zero ? (end - begin) / dp : end - begin;
    owned_.push_back({begin + (run_.cfg.zero ? me * piece : 0), begin + (run_.cfg.zero ? (me + 1) * piece : piece)});
  }
}

// AdamW on this rank's piece of every bucket (its state holds those pieces back to back), then the bucket's
// pieces all-gathered in place: every rank ends the step with every updated parameter.
void Trainer::update_and_gather() {
  const size_t dp = static_cast<size_t>(g_.dims.dp), me = static_cast<size_t>(g_.me.dp);
  adamw_.begin_step();
  size_t state = 0;
  for (auto [begin, end] : buckets_) {
    const size_t piece = (end - begin) / dp, mine = begin + me * piece;
    {
      trace::Span optimizer(*g_.world, "compute", "optimizer");
      adamw_.update(params_.data() + mine, grads_.data() + mine, piece, state);
    }
    state += piece;
    auto t0 = Clock::now();
    g_.dp->allgather(params_.data() + mine, params_.data() + begin, piece, DataType::float32);
    stats_.dp.seconds += since(t0), stats_.dp.bytes += (end - begin) * sizeof(float), stats_.dp.calls++;
  }
}

void Trainer::sync_sequence_parallel_gradients() {
  const std::vector<std::string> names = stage_->partial_gradient_params();
  if (names.empty()) return;
  // The pieces of those parameters this rank holds reduced: all of them, or under ZeRO its pieces of the
  // buckets. The tensor-parallel ranks share the layout and the data-parallel rank, so they hold the same
  // pieces. Summing over tp after summing over dp is the same sum.
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& n : names) {
    const ParamSpec& p = layout_.at(n);
    for (auto [b, e] : owned_) {
      const size_t lo = std::max(b, p.offset), hi = std::min(e, p.offset + p.numel);
      if (lo < hi) ranges.push_back({lo, hi});
    }
  }
  std::vector<float> packed;
  for (auto [lo, hi] : ranges)
    packed.insert(packed.end(), grads_.begin() + static_cast<long>(lo), grads_.begin() + static_cast<long>(hi));
  if (packed.empty()) return;
  tp_.allreduce_sum(packed.data(), packed.size());
  size_t at = 0;
  for (auto [lo, hi] : ranges) {
    std::copy_n(packed.begin() + static_cast<long>(at), hi - lo, grads_.begin() + static_cast<long>(lo));
    at += hi - lo;
  }
}

void Trainer::sync_tied_embedding() {
  const auto& st = layout_.stage();
  if (g_.dims.pp == 1 || !(st.first || st.last)) return;
  // wte is used by the first stage (embedding) and the last (output layer); both hold a copy and must
  // apply the sum of both gradients. a + b == b + a in floating point, so the copies stay identical.
  const ParamSpec& p = layout_.at("wte.weight");
  float* grad = grads_.data() + p.offset;
  // With bfloat16 on the wire both add the two rounded gradients, their own rounded too.
  if (wire_.bf16()) round_to_bf16(grad, p.numel);
  std::vector<float> mine(grad, grad + p.numel), theirs(p.numel);
  std::vector<uint16_t> out, in;
  int peer = st.first ? g_.dims.pp - 1 : 0;
  auto t0 = Clock::now();
  Request s = wire_.isend(*g_.pp, mine.data(), p.numel, peer, kTagEmbedding, out);
  wire_.irecv(*g_.pp, theirs.data(), p.numel, peer, kTagEmbedding, in).wait();
  wire_.finish_recv(theirs.data(), p.numel, in);
  s.wait();
  stats_.embedding.seconds += since(t0), stats_.embedding.bytes += wire_.bytes(p.numel), stats_.embedding.calls++;
  accumulate(grad, theirs.data(), p.numel);
}

double Trainer::step(int k) {
  trace::Span span(*g_.world, "step", "step", trace::enabled(*g_.world) ? "\"step\":" + std::to_string(k) : "");
  auto t0 = Clock::now();
  const auto& c = run_.cfg;
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  double loss_sum = 0;
  // Under ZeRO the tied wte's two gradients are added before its bucket is reduce-scattered (which leaves each
  // rank a piece only); otherwise after the all-reduce, so that both copies add the same two sums.
  tied_pending_ = c.zero && g_.dims.pp > 1 && (layout_.stage().first || layout_.stage().last);
  run_schedule(k, &loss_sum);  // with overlap, the last backward starts the buckets it finishes
  if (c.zero) {
    sync_tied_embedding();
    tied_pending_ = false;
  }
  launch_buckets(0);
  finish_buckets();
  sync_sequence_parallel_gradients();
  if (!c.zero) sync_tied_embedding();
  // The loss lives on the last stage; its data-parallel ranks each hold their sequences' share.
  if (layout_.stage().last && g_.dims.dp > 1) {
    auto t1 = Clock::now();
    g_.dp->allreduce(&loss_sum, &loss_sum, 1, DataType::float64, ReduceOp::sum);
    stats_.dp.seconds += since(t1), stats_.dp.bytes += sizeof(double), stats_.dp.calls++;
  }
  g_.world->broadcast(&loss_sum, 1, DataType::float64, rank_of({0, g_.dims.pp - 1, 0}, g_.dims));
  if (c.zero) {
    update_and_gather();
  } else {
    trace::Span optimizer(*g_.world, "compute", "optimizer");
    adamw_.step(params_.data(), grads_.data());
  }
  stats_.tp = tp_.meter;
  stats_.step_s += since(t0);
  return loss_sum / (static_cast<double>(c.batch) * c.seq);
}

void Trainer::save(const std::string& path) { save_model(g_, layout_, params_.data(), path); }

// ---------------------------------------------------------------------------------------------------
// a whole run

TrainResult train(const TrainConfig& cfg, Communicator& world, const std::function<void(int, double, double)>& on_step) {
  blas_single_thread();
  ResolvedRun run = resolve(cfg, world.size());
  if (!run.cfg.trace.empty()) trace::start(world);  // before the groups, so that they are traced too
  ParallelGroups groups = ParallelGroups::create(world, run.cfg.dims);
  trace::name(*groups.tp, "tp"), trace::name(*groups.pp, "pp"), trace::name(*groups.dp, "dp");
  Trainer trainer(run, groups);
  TrainResult result;
  auto t0 = Clock::now();
  for (int k = 0; k < run.cfg.steps; ++k) {
    auto t1 = Clock::now();
    double loss = trainer.step(k);
    result.losses.push_back(loss);
    if (on_step) on_step(k, loss, since(t1));
  }
  result.seconds = since(t0);
  auto spent = [](Communicator* comm) {
    double sec = 0;
    if (comm != nullptr && comm->size() > 1)
      for (const OpStats& k : comm->stats()) sec += k.seconds;
    return sec;
  };
  // The pipeline's receives are posted at the start of the step: their start-to-end time is mostly waiting for
  // the neighbour, so only the sends count as its traffic's time.
  const double sends = groups.pp->size() > 1 ? groups.pp->stats()[static_cast<size_t>(OpKind::send)].seconds : 0;
  trainer.set_spent(spent(groups.tp.get()), sends, spent(groups.dp.get()));
  if (!run.cfg.save.empty()) trainer.save(run.cfg.save);
  std::vector<double> mine = trainer.stats().to_vector();
  std::vector<double> all(world.rank() == 0 ? mine.size() * static_cast<size_t>(world.size()) : 0);
  world.gather(mine.data(), world.rank() == 0 ? all.data() : nullptr, mine.size(), DataType::float64, 0);
  if (world.rank() == 0)
    for (int r = 0; r < world.size(); ++r) result.ranks.push_back(RankStats::from_vector(all.data() + r * mine.size()));
  if (!run.cfg.trace.empty()) result.trace_bytes = trace::write(world, run.cfg.trace);
  const int P = run.cfg.dims.pp, M = run.cfg.micro_batches;
  result.bubble_theory = static_cast<double>(P - 1) / (M + P - 1);
  return result;
}

}  // namespace mpcomm::parallel
