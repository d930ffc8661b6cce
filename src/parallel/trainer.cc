#include "parallel/trainer.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "mpcomm/error.h"
#include "mpcomm/trace.h"
#include "parallel/checkpoint.h"
#include "parallel/elastic.h"
#include "parallel/kernels.h"

namespace mpcomm::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tags of the trainer's point-to-point traffic (checkpoint.cc uses 4): the tied embedding's exchange, and the
// activations and gradients for virtual stage vs (a stage, unless interleaved).
constexpr int kTagEmbedding = 3;
int tag_activation(int vs) { return 16 + 2 * vs; }
int tag_gradient(int vs) { return 17 + 2 * vs; }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// the trainer

namespace {

size_t round_up(size_t n, size_t k) { return (n + k - 1) / k * k; }

// The flat buffers' length: under ZeRO a multiple of dp, so that every bucket splits evenly.
size_t buffer_length(size_t total, const TrainConfig& c) {
  return c.zero ? round_up(total, static_cast<size_t>(c.dims.dp)) : total;
}

int chunks_of(const TrainConfig& c) {
  return parse_schedule(c.schedule) == ScheduleKind::interleaved ? c.virtual_stages : 1;
}

// Chunk v of pipeline rank s is virtual stage v·pp + s of pp·V (one chunk: the rank's stage).
std::vector<ShardLayout> make_layouts(const ResolvedRun& run, const ParallelGroups& g) {
  const int V = chunks_of(run.cfg);
  std::vector<ShardLayout> out;
  for (int v = 0; v < V; ++v)
    out.emplace_back(run.model, g.dims.tp, g.me.tp, g.dims.pp * V, v * g.dims.pp + g.me.pp, g.dims.ep,
                     g.me.dp % g.dims.ep);
  return out;
}

std::vector<size_t> make_bases(const std::vector<ShardLayout>& layouts) {
  std::vector<size_t> out;
  size_t at = 0;
  for (const auto& l : layouts) out.push_back(at), at += l.total();
  out.push_back(at);  // the end: the total
  return out;
}

using Ranges = std::vector<std::pair<size_t, size_t>>;

// The parts of the flat buffers summed over all data-parallel ranks (dense: every parameter but the experts,
// and ZeRO's padding) and those summed over the ranks holding the same experts.
Ranges dense_ranges(const std::vector<ShardLayout>& layouts, const std::vector<size_t>& bases, size_t n) {
  if (layouts.front().config().experts == 0) return {{0, n}};
  Ranges out;
  for (size_t v = 0; v < layouts.size(); ++v) out.push_back({bases[v], bases[v] + layouts[v].dense_total()});
  return out;
}

Ranges expert_ranges(const std::vector<ShardLayout>& layouts, const std::vector<size_t>& bases) {
  Ranges out;
  for (size_t v = 0; v < layouts.size(); ++v)
    if (layouts[v].dense_total() < layouts[v].total())
      out.push_back({bases[v] + layouts[v].dense_total(), bases[v + 1]});
  return out;
}

// Buckets over the dense ranges, from the end of the buffer back (the last layers' gradients are final first).
Ranges make_buckets(const Ranges& dense, const TrainConfig& c) {
  size_t bucket = std::max<size_t>(1, static_cast<size_t>(c.bucket_mb * 1048576.0 / sizeof(float)));
  if (c.zero) bucket = round_up(bucket, static_cast<size_t>(c.dims.dp));
  Ranges out;
  for (size_t r = dense.size(); r-- > 0;)
    for (size_t end = dense[r].second; end > dense[r].first;) {
      const size_t begin = end - dense[r].first > bucket ? end - bucket : dense[r].first;
      out.push_back({begin, end});
      end = begin;
    }
  return out;
}

}  // namespace

Trainer::Trainer(const ResolvedRun& run, ParallelGroups& groups, const TrainerState* from)
    : run_(run),
      g_(groups),
      layouts_(make_layouts(run, groups)),
      bases_(make_bases(layouts_)),
      params_(buffer_length(bases_.back(), run.cfg)),
      grads_(params_.size()),
      buckets_(make_buckets(dense_ranges(layouts_, bases_, params_.size()), run.cfg)),
      expert_ranges_(expert_ranges(layouts_, bases_)),
      adamw_(run.cfg.zero ? params_.size() / static_cast<size_t>(groups.dims.dp) : params_.size(), run.cfg.adamw),
      tp_(groups.tp.get()) {
  const auto& c = run_.cfg;
  wire_.type = parse_wire(c.comm_dtype);
  tp_.wire = wire_;
  tp_.reproducible = c.reproducible;
  if (c.reproducible) {
    grad_sum_ = std::make_unique<ReproducibleSum>(DataType::float32, params_.size());
    loss_sum_ = std::make_unique<ReproducibleSum>(DataType::float64, 1);
  }
  stats_.optimizer_bytes = static_cast<double>(adamw_.state_bytes());
  stats_.params = static_cast<double>(bases_.back());
  micro_seqs_ = static_cast<size_t>(c.micro_size > 0 ? c.micro_size : c.batch / (c.dims.dp * c.micro_batches));
  {  // this replica's share of the batch's micro-batches: the first `extra` replicas take one more
    const int total = c.batch / static_cast<int>(micro_seqs_), dp = g_.dims.dp, d = g_.me.dp;
    const int each = total / dp, extra = total % dp;
    micro_count_ = each + (d < extra ? 1 : 0);
    micro_first_ = d * each + std::min(d, extra);
    if (micro_count_ < 1)
      throw InvalidArgument("mpcomm train: " + std::to_string(total) + " micro-batches of " +
                            std::to_string(micro_seqs_) + " sequences leave none to data-parallel rank " +
                            std::to_string(d) + " of " + std::to_string(dp));
  }
  const MoEConfig moe{c.experts, c.top_k, static_cast<float>(c.aux_loss_coef), g_.ep.get(), &stats_.ep, wire_};
  for (size_t v = 0; v < layouts_.size(); ++v) {
    if (from == nullptr && run_.checkpoint)  // (with `from`, the parameters are copied below)
      load_shard(*run_.checkpoint, layouts_[v], params_.data() + bases_[v]);
    else if (from == nullptr)
      init_params(layouts_[v], c.seed, params_.data() + bases_[v]);
    stages_.push_back(std::make_unique<GPTStage>(layouts_[v], tp_, params_.data() + bases_[v],
                                                 grads_.data() + bases_[v], micro_seqs_, static_cast<size_t>(c.seq),
                                                 c.sequence_parallel, moe));
  }
  schedule_ = pipeline_schedule(parse_schedule(c.schedule), g_.me.pp, g_.dims.pp, micro_count_,
                                static_cast<int>(layouts_.size()));
  if (from != nullptr) {
    if (from->params.size() != params_.size())
      throw InvalidArgument("trainer: a state of " + std::to_string(from->params.size()) +
                            " parameters for a shard of " + std::to_string(params_.size()));
    std::copy(from->params.begin(), from->params.end(), params_.begin());
    adamw_.restore(from->m, from->v, from->adam_steps);
  }
}

void Trainer::save_state(TrainerState& into) const {
  if (run_.cfg.zero) throw Unsupported("trainer: the state of a ZeRO-1 rank is a piece of its replica's");
  into.params.assign(params_.begin(), params_.end());
  into.m.assign(adamw_.m().begin(), adamw_.m().end());
  into.v.assign(adamw_.v().begin(), adamw_.v().end());
  into.adam_steps = adamw_.steps();
}

void Trainer::take_state_from(int root) {
  if (run_.cfg.zero) throw Unsupported("trainer: the state of a ZeRO-1 rank is a piece of its replica's");
  if (g_.dims.dp == 1) return;
  int32_t t = adamw_.steps();
  Communicator& dp = *g_.dp;
  dp.broadcast(params_.data(), params_.size(), DataType::float32, root);
  dp.broadcast(adamw_.m_data(), adamw_.size(), DataType::float32, root);
  dp.broadcast(adamw_.v_data(), adamw_.size(), DataType::float32, root);
  dp.broadcast(&t, 1, DataType::int32, root);
  adamw_.set_steps(t);
}

const ParamSpec& Trainer::spec_of(const std::string& name) const {
  for (const auto& l : layouts_)
    if (l.has(name)) return l.at(name);
  throw Internal("trainer: this rank holds no parameter " + name);
}

size_t Trainer::offset_of(const std::string& name) const {
  for (size_t v = 0; v < layouts_.size(); ++v)
    if (layouts_[v].has(name)) return bases_[v] + layouts_[v].at(name).offset;
  throw Internal("trainer: this rank holds no parameter " + name);
}

Trainer::~Trainer() = default;

void Trainer::run_schedule(int k, double* loss_sum) {
  const auto& c = run_.cfg;
  // N: the micro-batch's tokens; R: the rows of the activations the stages pass (N/tp with sequence parallelism).
  const size_t T = static_cast<size_t>(c.seq), N = micro_seqs_ * T, C = static_cast<size_t>(run_.model.hidden);
  const size_t R = stages_.front()->rows();
  const size_t B = static_cast<size_t>(c.batch);
  const float loss_scale = 1.0f / static_cast<float>(B * T);
  // Virtual stages (interleaved; otherwise one chunk, virtual stage = stage): chunk v of this rank is virtual
  // stage v·P + rank; its input comes from virtual stage vs-1 and its output goes to vs+1, on rank (vs±1) % P.
  const int P = g_.dims.pp, V = static_cast<int>(stages_.size()), M = micro_count_, last_vs = P * V - 1;
  auto vstage = [&](int chunk) { return chunk * P + g_.me.pp; };
  Communicator* pp = g_.pp.get();
  std::vector<int32_t> inputs(N), targets(N);
  // Per (chunk, micro-batch), keyed chunk·M + m.
  std::map<int, std::vector<float>> received, sending, received_grad, sending_grad;
  std::vector<Request> sends;
  const bool traced = trace::enabled(*g_.world);
  const int last_micro = M - 1;  // every schedule runs the backwards in micro-batch order
  const std::function<void(size_t)> on_final = [this](size_t frontier) { launch_buckets(frontier); };

  // Every receive of the step is posted at its start (messages of one tag from one peer match in order), so
  // that a neighbour's send completes as soon as it is made; a recv action waits for its own.
  // bfloat16 on the wire (wire.h): what arrives lands in staging and is widened by recv(); what leaves is
  // rounded into staging that lives until the step's sends are waited for.
  std::map<int, std::vector<uint16_t>> staged_fwd, staged_bwd;
  std::vector<std::vector<uint16_t>> send_staging;
  send_staging.reserve(2 * static_cast<size_t>(M * V));  // no reallocation while sends are in flight
  std::map<int, Request> posted_fwd, posted_bwd;
  if (P > 1) {
    auto t0 = Clock::now();
    for (int v = 0; v < V; ++v)
      for (int m = 0; m < M; ++m) {
        const int vs = vstage(v), key = v * M + m;
        if (vs > 0) {
          received[key].resize(R * C);
          posted_fwd[key] =
              wire_.irecv(*pp, received[key].data(), R * C, (vs - 1) % P, tag_activation(vs), staged_fwd[key]);
        }
        if (vs < last_vs) {
          received_grad[key].resize(R * C);
          posted_bwd[key] =
              wire_.irecv(*pp, received_grad[key].data(), R * C, (vs + 1) % P, tag_gradient(vs), staged_bwd[key]);
        }
      }
    stats_.pp.seconds += since(t0);
  }
  auto recv = [&](std::map<int, Request>& posted, std::map<int, std::vector<uint16_t>>& staged,
                  std::map<int, std::vector<float>>& into, int key) {
    auto t0 = Clock::now();
    posted.at(key).wait();
    double s = since(t0);
    wire_.finish_recv(into.at(key).data(), R * C, staged[key]);
    stats_.pp.seconds += s, stats_.pp_wait_s += s, stats_.pp.bytes += wire_.bytes(R * C), stats_.pp.calls++;
  };
  auto send = [&](const std::vector<float>& buf, int peer, int tag) {
    auto t0 = Clock::now();
    send_staging.emplace_back();
    sends.push_back(wire_.isend(*pp, buf.data(), R * C, peer, tag, send_staging.back()));
    stats_.pp.seconds += since(t0), stats_.pp.bytes += wire_.bytes(R * C), stats_.pp.calls++;
  };

  for (const Action& a : schedule_) {
    const int m = a.micro, v = a.chunk, vs = vstage(v), key = v * M + m;
    GPTStage& stage = *stages_.at(static_cast<size_t>(v));
    switch (a.kind) {
      case ActionKind::recv_forward:
        recv(posted_fwd, staged_fwd, received, key);
        break;
      case ActionKind::forward: {
        trace::Span span(*g_.world, "compute", "forward",
                         traced ? "\"micro\":" + std::to_string(m) + ",\"chunk\":" + std::to_string(v) : "");
        const size_t first = static_cast<size_t>(micro_first_ + m) * micro_seqs_;
        run_.data->batch(static_cast<uint64_t>(k), first, micro_seqs_, B, T, inputs.data(), targets.data());
        const float* in = received.count(key) ? received[key].data() : nullptr;
        double micro_loss = 0;
        const float* out = stage.forward(m, in, inputs.data(), targets.data(), &micro_loss);
        *loss_sum += micro_loss;
        if (loss_sum_ && out == nullptr) loss_sum_->add(&micro_loss);  // the last stage: a micro-batch's loss
        received.erase(key);
        if (out != nullptr) sending[key].assign(out, out + R * C);
        break;
      }
      case ActionKind::send_forward: send(sending[key], (vs + 1) % P, tag_activation(vs + 1)); break;
      case ActionKind::recv_backward:
        recv(posted_bwd, staged_bwd, received_grad, key);
        break;
      case ActionKind::backward: {
        trace::Span span(*g_.world, "compute", "backward",
                         traced ? "\"micro\":" + std::to_string(m) + ",\"chunk\":" + std::to_string(v) : "");
        const float* dout = received_grad.count(key) ? received_grad[key].data() : nullptr;
        // The frontier of final gradients is one buffer's: with several chunks every bucket waits for the end.
        // The experts sit at the buffer's end, apart from their layers: with experts too.
        const bool hook = c.overlap && V == 1 && c.experts == 0 && !grad_sum_ && m == last_micro;
        // reproducible: each micro-batch's gradients alone, added to the accumulator
        if (grad_sum_) std::fill(grads_.begin(), grads_.end(), 0.0f);
        const float* din = stage.backward(m, dout, loss_scale, hook ? &on_final : nullptr);
        if (grad_sum_) grad_sum_->add(grads_.data());
        received_grad.erase(key);
        if (din != nullptr) sending_grad[key].assign(din, din + R * C);
        break;
      }
      case ActionKind::send_backward: send(sending_grad[key], (vs - 1) % P, tag_gradient(vs - 1)); break;
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
    if (tied_pending_ && begin < offset_of("wte.weight") + spec_of("wte.weight").numel) break;
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

void Trainer::reduce_experts() {
  Communicator* holders = g_.edp ? g_.edp.get() : g_.dp.get();
  for (auto [begin, end] : expert_ranges_) {
    if (holders->size() > 1) {
      auto t0 = Clock::now();
      wire_.allreduce_sum(*holders, grads_.data() + begin, end - begin);  // as the other gradients travel
      stats_.dp.seconds += since(t0), stats_.dp.bytes += wire_.bytes(end - begin), stats_.dp.calls++;
    }
    if (g_.dims.dp > 1) owned_.push_back({begin, end});  // with dp 1, finish_buckets owns the whole buffer
  }
}

std::vector<std::vector<int64_t>> Trainer::routing() const {
  std::vector<std::vector<int64_t>> out;
  for (const auto& st : stages_) out.insert(out.end(), st->routing().begin(), st->routing().end());
  return out;
}

void Trainer::sync_sequence_parallel_gradients() {
  std::vector<std::string> names;
  for (const auto& st : stages_) {
    const auto more = st->partial_gradient_params();
    names.insert(names.end(), more.begin(), more.end());
  }
  if (names.empty()) return;
  // The pieces of those parameters this rank holds reduced: all of them, or under ZeRO its pieces of the
  // buckets. The tensor-parallel ranks share the layout and the data-parallel rank, so they hold the same
  // pieces. Summing over tp after summing over dp is the same sum.
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& n : names) {
    const size_t at = offset_of(n), numel = spec_of(n).numel;
    for (auto [b, e] : owned_) {
      const size_t lo = std::max(b, at), hi = std::min(e, at + numel);
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
  if (g_.dims.pp == 1 || !(holds_first() || holds_last())) return;
  // wte is used by the first stage (embedding) and the last (output layer); both hold a copy and must
  // apply the sum of both gradients. a + b == b + a in floating point, so the copies stay identical.
  const ParamSpec& p = spec_of("wte.weight");
  float* grad = grads_.data() + offset_of("wte.weight");
  // With bfloat16 on the wire both add the two rounded gradients, their own rounded too.
  if (wire_.bf16()) round_to_bf16(grad, p.numel);
  std::vector<float> mine(grad, grad + p.numel), theirs(p.numel);
  std::vector<uint16_t> out, in;
  int peer = holds_first() ? g_.dims.pp - 1 : 0;
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
  if (grad_sum_) grad_sum_->clear(), loss_sum_->clear();
  double loss_sum = 0;
  // Under ZeRO the tied wte's two gradients are added before its bucket is reduce-scattered (which leaves each
  // rank a piece only); otherwise after the all-reduce, so that both copies add the same two sums.
  tied_pending_ = c.zero && g_.dims.pp > 1 && (holds_first() || holds_last());
  run_schedule(k, &loss_sum);  // with overlap, the last backward starts the buckets it finishes
  if (c.zero) {
    sync_tied_embedding();
    tied_pending_ = false;
  }
  if (grad_sum_) {  // every micro-batch's gradients, of every data-parallel rank, summed exactly
    auto t1 = Clock::now();
    grad_sum_->allreduce(*g_.dp, grads_.data());
    stats_.dp.seconds += since(t1), stats_.dp.bytes += grads_.size() * sizeof(float), stats_.dp.calls++;
    owned_.assign(1, {0, grads_.size()});
  } else {
    launch_buckets(0);
    finish_buckets();
  }
  reduce_experts();
  sync_sequence_parallel_gradients();
  if (!c.zero) sync_tied_embedding();
  // The loss lives on the last stage; its data-parallel ranks each hold their sequences' share.
  if (holds_last() && loss_sum_) {
    loss_sum_->allreduce(*g_.dp, &loss_sum);
  } else if (holds_last() && g_.dims.dp > 1) {
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
  stats_.aux_loss = 0;
  for (const auto& st : stages_) stats_.aux_loss += st->aux_loss();
  stats_.step_s += since(t0);
  return loss_sum / (static_cast<double>(c.batch) * c.seq);
}

void Trainer::save(const std::string& path) { save_model(g_, layouts_, params_.data(), path); }

// ---------------------------------------------------------------------------------------------------
// a whole run

TrainResult train(const TrainConfig& cfg, Communicator& world, const std::function<void(int, double, double)>& on_step) {
  if (cfg.elastic) {
    ElasticHooks hooks;
    hooks.on_step = [&](int k, double loss, double s, const Communicator&) {
      if (on_step) on_step(k, loss, s);
    };
    return train_elastic(cfg, world, hooks);
  }
  blas_single_thread();
  ResolvedRun run = resolve(cfg, world.size());
  if (!run.cfg.trace.empty()) trace::start(world);  // before the groups, so that they are traced too
  ParallelGroups groups = ParallelGroups::create(world, run.cfg.dims);
  trace::name(*groups.tp, "tp"), trace::name(*groups.pp, "pp"), trace::name(*groups.dp, "dp");
  if (groups.ep) trace::name(*groups.ep, "ep"), trace::name(*groups.edp, "expert dp");
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
  finish_run(run, trainer, groups, world, result);
  return result;
}

void record_spent(Trainer& trainer, ParallelGroups& groups) {
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
}

void finish_run(const ResolvedRun& run, Trainer& trainer, ParallelGroups& groups, Communicator& world,
                TrainResult& result, const std::vector<double>& earlier) {
  record_spent(trainer, groups);
  if (!run.cfg.save.empty()) trainer.save(run.cfg.save);
  std::vector<double> mine = trainer.stats().to_vector();
  for (size_t i = 0; i < earlier.size() && i < mine.size(); ++i) mine[i] += earlier[i];
  if (!earlier.empty()) {  // what the rank holds now, not a sum over the trainers it had
    RankStats summed = RankStats::from_vector(mine.data());
    summed.optimizer_bytes = trainer.stats().optimizer_bytes, summed.params = trainer.stats().params;
    mine = summed.to_vector();
  }
  std::vector<double> all(world.rank() == 0 ? mine.size() * static_cast<size_t>(world.size()) : 0);
  world.gather(mine.data(), world.rank() == 0 ? all.data() : nullptr, mine.size(), DataType::float64, 0);
  if (world.rank() == 0)
    for (int r = 0; r < world.size(); ++r) result.ranks.push_back(RankStats::from_vector(all.data() + r * mine.size()));
  if (!run.cfg.trace.empty()) result.trace_bytes = trace::write(world, run.cfg.trace);
  const int P = run.cfg.dims.pp, M = trainer.micro_batches();
  // A chunk is 1/V of a stage: the bubble is (P-1)/V of a stage's time, of a step of M + (P-1)/V.
  const int V = chunks_of(run.cfg);
  result.bubble_theory = static_cast<double>(P - 1) / (static_cast<double>(V) * M + P - 1);
}

}  // namespace mpcomm::parallel
