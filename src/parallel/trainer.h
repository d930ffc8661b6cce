// Training GPT-2 with tensor, pipeline and data parallelism over any Communicator.
//
// One step, on every rank:
//   1. the rank's pipeline schedule (schedule.h) runs over its micro-batches: forwards and backwards of
//      its stage (gpt.h), activations and gradients to the neighbour stages by isend/irecv;
//   2. data-parallel all-reduce (or, ZeRO-1, reduce-scatter) of the gradients, in buckets of bucket_mb over the
//      flat gradient buffer, each started as the last backward finishes its gradients (overlap);
//   3. with several stages, the first and last stage add their gradients of the tied wte;
//   4. the loss (sum of per-token losses, all-reduced over data parallel on the last stage) is broadcast to
//      every rank; AdamW updates the rank's parameters.
// Splitting the model changes only the order of some float additions: the losses equal a single-process
// run's to ~1e-6 relative.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpcomm/reproducible.h"
#include "parallel/adamw.h"
#include "parallel/data.h"
#include "parallel/gpt.h"
#include "parallel/groups.h"
#include "parallel/layout.h"
#include "parallel/safetensors.h"
#include "parallel/schedule.h"
#include "parallel/wire.h"

namespace mpcomm::parallel {

struct TrainConfig {
  ParallelDims dims;
  int micro_batches = 1;
  std::string schedule = "1f1b";  // or "gpipe"
  // Model size; 0 = from the checkpoint (--init-from), else the defaults below.
  int layers = 0, hidden = 0, heads = 0;
  int seq = 64;     // T
  int batch = 8;    // B: sequences per step, over all data-parallel ranks
  int steps = 10;
  uint64_t seed = 1234;
  AdamWOptions adamw;
  std::string data;    // bytes as tokens (the default corpus when both are empty)
  std::string tokens;  // uint16 little-endian ids
  int vocab = 0;       // --tokens: the vocabulary (0: largest id + 1, or the checkpoint's)
  std::string init_from, save;
  double bucket_mb = 25;
  // 1: ZeRO stage 1, the distributed optimizer — each data-parallel bucket of gradients is reduce-scattered,
  // each data-parallel rank keeps the AdamW state of (and updates) only its 1/dp of every bucket, and the
  // updated parameters are all-gathered. 0: the gradients are all-reduced and every rank updates every
  // parameter.
  int zero = 0;
  // Megatron's sequence parallelism inside each tensor-parallel group (tp_layers.h): reduce-scatter and
  // all-gather in place of the all-reduces, LayerNorms and residuals on 1/tp of the tokens.
  bool sequence_parallel = false;
  // Data-parallel buckets start reducing (non-blocking) as soon as the step's last backward has made their
  // gradients final, and run while the backward goes on; false: all of them after the backward.
  bool overlap = true;
  // What activations and gradients travel as (wire.h): "float32" or "bfloat16" (rounded to bfloat16 on the
  // way out, float32 compute, master weights and accumulation in the reductions).
  std::string comm_dtype = "float32";
  // --schedule interleaved: the model chunks each rank holds (virtual stage v·pp + rank for chunk v).
  int virtual_stages = 1;
  // Mixture of experts (moe.h): 0, or the experts of every moe_every-th layer's MLP, each token going to its
  // top_k; the experts are spread over dims.ep ranks taken from the data-parallel ones. aux_loss_coef: α of the
  // load-balancing loss.
  int experts = 0, top_k = 1, moe_every = 1;
  double aux_loss_coef = 0.01;
  // Reproducible sums (mpcomm/reproducible.h) for the data-parallel gradients (each micro-batch's added to an
  // accumulator), the loss and the tensor-parallel sums: with the micro-batch size, tp and pp fixed, the losses
  // and the saved model are the same bits for any dp, backend or host layout.
  bool reproducible = false;
  // Sequences per micro-batch; 0: batch / (dp × micro_batches), every data-parallel rank running
  // micro_batches. Set, the batch's batch / micro_size micro-batches are dealt out in order, as evenly as they
  // go, over the dp replicas (an elastic run that lost a replica keeps its global batch and micro-batch size).
  int micro_size = 0;
  // Survive a lost rank (train_elastic, elastic.h): its replica leaves and the rest go on at dp - 1.
  bool elastic = false;
  // Elastic: replicas grow back in — processes that join the job (a lost rank started again, the other ranks
  // of its replica waiting in join()) are taken in at a step boundary, up to the starting dp, and receive the
  // parameters and optimizer state from data-parallel rank 0.
  bool grow_back = false;
  // A timeline of the run (mpcomm/trace.h): every rank's ops and its forwards, backwards and optimizer
  // steps, written here by world rank 0 at the end. Empty: none.
  std::string trace;
};

// The corpus used when neither data nor tokens is given: the GNU GPL text every Debian system has.
std::string default_corpus();

// Everything a rank needs before training, checked: the model, the data. Throws InvalidArgument naming
// the flag or file at fault (tp·pp·dp ≠ world, heads not divisible by tp, fewer layers than stages, batch
// not divisible by micro-batches × dp, sequence longer than the model's positions, a missing or malformed
// checkpoint, a token outside the vocabulary, ...). Pure: no communication, so every rank fails alike.
struct ResolvedRun {
  TrainConfig cfg;
  GPTConfig model;
  std::shared_ptr<const TokenData> data;
  std::shared_ptr<const SafetensorsFile> checkpoint;  // null: initialize from the seed
};
ResolvedRun resolve(const TrainConfig& cfg, int world_size);

// Time and bytes of one rank, by kind of traffic.
struct RankStats {
  // Time the trainer waited (exposed), bytes and calls: tensor-parallel collectives, pipeline p2p,
  // data-parallel reductions, tied wte.
  CommMeter tp, pp, dp, embedding, ep;  // ep: the mixture of experts' all-to-alls
  // Time the ops of each group ran, start to end, as the library measured them (Communicator::stats):
  // more than the exposed time where ops ran behind compute. Pipeline: its sends only (its receives are
  // posted at the start of the step and mostly wait for the neighbour).
  double tp_spent = 0, pp_spent = 0, dp_spent = 0;
  double pp_wait_s = 0;             // of pp.seconds: blocked in pipeline receives
  double step_s = 0;                // all steps
  double optimizer_bytes = 0;       // the rank's AdamW state (m and v)
  double params = 0;                // the rank's parameters (its tp and pp shard)
  std::vector<double> to_vector() const;
  static RankStats from_vector(const double* v);
  double aux_loss = 0;  // the load-balancing loss of the rank's sequences, all steps
  static constexpr int kFields = 23;
};

// What a rank's training has learned: its parameters and its optimizer's state (non-ZeRO: the same on every
// data-parallel rank of its tensor and pipeline coordinates).
struct TrainerState {
  std::vector<float> params, m, v;
  int adam_steps = 0;
};

class Trainer {
 public:
  // Collective over the groups' world. Loads or initializes the parameters, or takes them and the optimizer's
  // state from `from` (which must fit this rank's shard).
  Trainer(const ResolvedRun& run, ParallelGroups& groups, const TrainerState* from = nullptr);
  ~Trainer();
  // Runs training step k and returns the global batch's mean loss (its forward loss before the update),
  // the same on every rank.
  double step(int k);
  // Collective: writes the whole model (see save_model).
  void save(const std::string& path);
  const RankStats& stats() const { return stats_; }
  void set_spent(double tp, double pp, double dp) { stats_.tp_spent = tp, stats_.pp_spent = pp, stats_.dp_spent = dp; }
  // The rank's first model chunk (its only one unless the schedule is interleaved).
  const ShardLayout& layout() const { return layouts_.front(); }
  // Mixture of experts: per MoE layer forward of every chunk, in the order they ran, this rank's assignments
  // per expert (GPTStage::routing).
  std::vector<std::vector<int64_t>> routing() const;
  const std::vector<float>& params() const { return params_; }
  // Copies the parameters and the optimizer's state into `into` (reusing its memory). Not under ZeRO.
  void save_state(TrainerState& into) const;
  // Collective over the data-parallel group: every rank takes the parameters and optimizer state of
  // data-parallel rank `root` (a replica that joined gets what the others learned). Not under ZeRO.
  void take_state_from(int root);
  // This rank's micro-batches per step, and the first one's index in the global batch.
  int micro_batches() const { return micro_count_; }
  int first_micro() const { return micro_first_; }

 private:
  void run_schedule(int k, double* loss_sum);
  void sync_tied_embedding();
  // Data parallelism: starts the reduction (all-reduce; ZeRO-1: reduce-scatter into this rank's piece) of
  // every bucket not started yet that lies wholly at or after `frontier` (whose gradients are final).
  void launch_buckets(size_t frontier);
  // Waits for every started bucket; afterwards owned_ says which ranges hold reduced gradients.
  void finish_buckets();
  // ZeRO-1: the rank's piece of each bucket updated and all-gathered.
  void update_and_gather();
  // Sequence parallelism: the gradients of the LayerNorms and the row-parallel biases summed over the
  // tensor-parallel ranks (each computed them from its own rows), where this rank holds reduced gradients.
  void sync_sequence_parallel_gradients();
  // Mixture of experts: the rank's experts' gradients summed over the ranks holding the same experts.
  void reduce_experts();

  ResolvedRun run_;
  ParallelGroups& g_;
  // The rank's model chunks (one, or V interleaved): their layouts and where each starts in the flat buffers.
  std::vector<ShardLayout> layouts_;
  std::vector<size_t> bases_;
  std::vector<float> params_, grads_;  // the chunks back to back, padded to a multiple of dp under ZeRO
  // Data-parallel buckets [begin, end) of the flat buffers, the last layers' first (a backward finishes
  // them first); under ZeRO each a multiple of dp long.
  std::vector<std::pair<size_t, size_t>> buckets_;
  std::vector<std::pair<size_t, size_t>> expert_ranges_;  // the rank's experts, per chunk
  size_t launched_ = 0;  // buckets started this step
  struct BucketOp {
    size_t begin = 0, end = 0;
    Request request;
    size_t block = 0;               // bfloat16: elements per rank's block
    std::vector<uint16_t> out, in;  // bfloat16: the all-to-all's buffers
  };
  std::vector<BucketOp> bucket_ops_;
  Wire wire_;
  bool tied_pending_ = false;                     // ZeRO: wte's bucket waits for the tied exchange
  std::vector<std::pair<size_t, size_t>> owned_;  // ranges holding reduced gradients after finish_buckets
  AdamW adamw_;
  TensorParallel tp_;
  std::vector<std::unique_ptr<GPTStage>> stages_;  // one per chunk
  // The flat-buffer offset of parameter `name` of this rank (in the chunk that holds it).
  size_t offset_of(const std::string& name) const;
  const ParamSpec& spec_of(const std::string& name) const;
  bool holds_first() const { return layouts_.front().stage().first; }  // virtual stage 0: the embedding
  bool holds_last() const { return layouts_.back().stage().last; }     // the last virtual stage: the loss
  std::vector<Action> schedule_;
  // --reproducible: this step's micro-batch gradients and losses, summed exactly.
  std::unique_ptr<ReproducibleSum> grad_sum_, loss_sum_;
  size_t micro_seqs_;  // sequences per micro-batch
  int micro_count_ = 0, micro_first_ = 0;
  RankStats stats_;
};

struct TrainResult {
  std::vector<double> losses;     // per step, on every rank
  std::vector<RankStats> ranks;   // per world rank, on world rank 0 only
  double seconds = 0;
  double bubble_theory = 0;       // (pp-1)/(M+pp-1)
  size_t trace_bytes = 0;         // the timeline's size (world rank 0, with cfg.trace)
};

// The whole run on one rank: groups, trainer, `steps` steps, the optional save, the stats gathered to
// rank 0. on_step(k, loss, seconds) is called on every rank after each step.
// (With cfg.elastic: train_elastic, elastic.h.)
TrainResult train(const TrainConfig& cfg, Communicator& world,
                  const std::function<void(int, double, double)>& on_step = {});

// The end of a run on every rank: the spent times of the groups, the optional save, the stats gathered to the
// world's rank 0 (each rank's own added to `earlier`, where an elastic run keeps those of trainers it replaced),
// the timeline, the bubble's theory.
void finish_run(const ResolvedRun& run, Trainer& trainer, ParallelGroups& groups, Communicator& world,
                TrainResult& result, const std::vector<double>& earlier = {});
// The spent times of the groups' ops, into the trainer's stats.
void record_spent(Trainer& trainer, ParallelGroups& groups);

}  // namespace mpcomm::parallel
