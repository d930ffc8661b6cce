// The trainer's configuration checked before any traffic (resolve), and its per-rank statistics as the
// numbers world rank 0 gathers.
#include <string>

#include "mpcomm/error.h"
#include "parallel/checkpoint.h"
#include "parallel/trainer.h"

namespace mpcomm::parallel {

namespace {

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
  const ScheduleKind kind = parse_schedule(c.schedule);
  if (c.micro_batches < 1) bad("--micro-batches must be at least 1");
  if (kind == ScheduleKind::interleaved) {
    if (c.virtual_stages < 2)
      bad("--schedule interleaved needs --virtual-stages 2 or more (with 1 it is the 1f1b schedule)");
    if (d.pp < 2) bad("--schedule interleaved needs --pp 2 or more");
    if (c.micro_batches % d.pp != 0)
      bad("--schedule interleaved: --micro-batches " + std::to_string(c.micro_batches) + " is not a multiple of --pp " +
          std::to_string(d.pp));
  } else if (c.virtual_stages != 1) {
    bad("--virtual-stages " + std::to_string(c.virtual_stages) + " needs --schedule interleaved");
  }
  if (c.steps < 0) bad("--steps must not be negative");
  if (c.seq < 1) bad("--seq must be at least 1");
  if (c.batch < 1) bad("--batch must be at least 1");
  if (c.micro_size < 0) bad("the micro-batch size must not be negative");
  if (c.micro_size > 0 && (c.batch % c.micro_size != 0 || c.batch / c.micro_size < d.dp))
    bad("--batch " + std::to_string(c.batch) + " is not a whole number, at least --dp " + std::to_string(d.dp) +
        ", of micro-batches of " + std::to_string(c.micro_size) + " sequences");
  if (c.micro_size == 0 && c.batch % (c.micro_batches * d.dp) != 0)
    bad("--batch " + std::to_string(c.batch) + " is not divisible by --micro-batches " +
        std::to_string(c.micro_batches) + " × --dp " + std::to_string(d.dp));
  const int micro_seqs = c.micro_size > 0 ? c.micro_size : c.batch / (d.dp * c.micro_batches);
  if (!(c.adamw.lr >= 0) || !(c.adamw.eps >= 0) || !(c.adamw.weight_decay >= 0) || !(c.adamw.beta1 >= 0) ||
      !(c.adamw.beta1 < 1) || !(c.adamw.beta2 >= 0) || !(c.adamw.beta2 < 1))
    bad("AdamW wants --lr, --eps, --weight-decay >= 0 and --beta1, --beta2 in [0, 1)");
  if (!(c.bucket_mb > 0)) bad("--bucket-mb must be positive");
  parse_wire(c.comm_dtype);
  if (c.zero != 0 && c.zero != 1)
    bad("--zero " + std::to_string(c.zero) + ": stage 0 or 1 (the optimizer state sharded)");
  if (c.sequence_parallel && d.tp == 1)
    bad("--sequence-parallel shards the tokens over the tensor-parallel ranks, and --tp is 1: give --tp 2 or more");
  if (c.sequence_parallel && (micro_seqs * c.seq) % d.tp != 0)
    bad("--sequence-parallel: a micro-batch's " + std::to_string(micro_seqs * c.seq) +
        " tokens (--batch / (--dp × --micro-batches) × --seq) do not split evenly over --tp " + std::to_string(d.tp));
  if (c.experts < 0 || c.moe_every < 1 || d.ep < 1)
    bad("--experts must not be negative, --moe-every and --expert-parallel at least 1");
  // An elastic run rebuilds its groups at dp - 1 from every rank's own parameters and optimizer state: those
  // must be whole on every replica, and the schedule must take any number of micro-batches.
  if (c.elastic && c.zero != 0) bad("--elastic with --zero 1 is not supported (the optimizer state is sharded)");
  if (c.elastic && c.experts != 0) bad("--elastic with --experts is not supported (the experts are sharded over dp)");
  if (c.elastic && kind == ScheduleKind::interleaved)
    bad("--elastic with --schedule interleaved is not supported (its micro-batches must stay a multiple of --pp)");
  if (c.elastic && !c.trace.empty()) bad("--elastic with --trace is not supported yet");
  if (c.reproducible && (c.zero != 0 || c.comm_dtype != "float32"))
    bad("--reproducible with --zero 1 or --comm-dtype bfloat16 is not supported yet");
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
    agree(c.experts, m.experts, "experts");
    if (m.experts > 0 && c.moe_every != 1) agree(c.moe_every, m.moe_every, "moe-every");
    c.experts = m.experts;  // a mixture-of-experts checkpoint: its experts, the flags' routing
  } else {
    m.layers = c.layers ? c.layers : 4;
    m.hidden = c.hidden ? c.hidden : 128;
    m.heads = c.heads ? c.heads : 4;
    m.vocab = c.vocab ? c.vocab : r.data->vocab_needed();
    m.positions = c.seq;
    m.experts = c.experts;
    m.moe_every = c.moe_every;
  }
  if (m.experts > 0 && m.moe_every > m.layers)
    bad("--moe-every " + std::to_string(m.moe_every) + " leaves none of the " + std::to_string(m.layers) +
        " layers a mixture of experts");
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1) bad("--layers, --hidden and --heads must be at least 1");
  if (m.hidden % m.heads != 0)
    bad("--hidden " + std::to_string(m.hidden) + " is not divisible by --heads " + std::to_string(m.heads));
  if (m.heads % d.tp != 0)
    bad("--heads " + std::to_string(m.heads) + " is not divisible by --tp " + std::to_string(d.tp));
  if (m.layers < d.pp)
    bad(std::to_string(m.layers) + " layers cannot fill --pp " + std::to_string(d.pp) + " pipeline stages");
  if (kind == ScheduleKind::interleaved && (m.layers % d.pp != 0 || (m.layers / d.pp) % c.virtual_stages != 0))
    bad("--virtual-stages " + std::to_string(c.virtual_stages) + " does not divide the layers per stage: " +
        std::to_string(m.layers) + " layers over --pp " + std::to_string(d.pp) +
        (m.layers % d.pp != 0 ? " do not split evenly" : " are " + std::to_string(m.layers / d.pp) + " per stage"));
  if (c.seq > m.positions)
    bad("--seq " + std::to_string(c.seq) + " is longer than the model's " + std::to_string(m.positions) + " positions");
  if (r.data->vocab_needed() > m.vocab)
    bad("training data " + r.data->path() + " has token id " + std::to_string(r.data->vocab_needed() - 1) +
        ", outside the model's vocabulary of " + std::to_string(m.vocab));
  if (r.data->size() < static_cast<size_t>(c.seq) + 2)
    bad("training data " + r.data->path() + " has " + std::to_string(r.data->size()) + " tokens; --seq " +
        std::to_string(c.seq) + " needs at least " + std::to_string(c.seq + 2));
  if (r.checkpoint) check_checkpoint(*r.checkpoint, m);
  // mixture of experts
  if (c.experts == 0 && d.ep != 1) bad("--expert-parallel " + std::to_string(d.ep) + " needs --experts");
  if (c.experts > 0) {
    if (c.top_k < 1 || c.top_k > c.experts)
      bad("--top-k " + std::to_string(c.top_k) + " must be in 1..--experts " + std::to_string(c.experts));
    if (d.dp % d.ep != 0)
      bad("--expert-parallel " + std::to_string(d.ep) +
          " takes its ranks from the data-parallel ones: it must divide --dp " + std::to_string(d.dp));
    if (c.experts % d.ep != 0)
      bad("--experts " + std::to_string(c.experts) + " is not divisible by --expert-parallel " + std::to_string(d.ep) +
          " ranks");
    if (c.zero != 0) bad("--zero 1 with --experts is not supported: the experts' optimizer state is not sharded yet");
    if (c.reproducible) bad("--reproducible with --experts is not supported yet");
    if (!(c.aux_loss_coef >= 0)) bad("--aux-loss-coef must not be negative");
  }

  c.layers = m.layers, c.hidden = m.hidden, c.heads = m.heads, c.moe_every = m.moe_every;
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
          dp_spent,
          ep.seconds,
          double(ep.bytes),
          double(ep.calls),
          aux_loss};
}

RankStats RankStats::from_vector(const double* v) {
  RankStats s;
  auto meter = [](const double* p) { return CommMeter{p[0], uint64_t(p[1]), uint64_t(p[2])}; };
  s.tp = meter(v), s.pp = meter(v + 3), s.dp = meter(v + 6), s.embedding = meter(v + 9);
  s.pp_wait_s = v[12], s.step_s = v[13], s.optimizer_bytes = v[14], s.params = v[15];
  s.tp_spent = v[16], s.pp_spent = v[17], s.dp_spent = v[18];
  s.ep = meter(v + 19), s.aux_loss = v[22];
  return s;
}

}  // namespace mpcomm::parallel
