// The alpha-beta cost model: the time of a collective as a fixed cost per call, a latency per algorithm step
// and bytes over bandwidth, per link level (within a host, between hosts), composed the way each algorithm
// moves its bytes. The structure is the one NCCL's tuner uses (per-step latencies by interconnect, a bus
// factor per algorithm); the constants come from a profile (profile.h): measured on this machine by
// `mpcomm plan --calibrate`, or published figures for machines we do not have. The planner
// (parallel/planner.h), `mpcomm plan --predict`, the predictions beside `mpcomm train` and `mpcomm compare`, and
// the auto backend where its table has no row for a call (backends/auto/router.h) ask it.
//
// Sizes are nccl-tests': allreduce and broadcast the buffer, allgather the whole output, reduce_scatter the
// whole input, alltoall what one rank sends in all, sendrecv what one rank sends.
//
// An algorithm is a sequence of phases; a phase costs
//     steps_intra · alpha_intra + steps_inter · alpha_inter + max(bytes_rank / bw_rank, bytes_host / bw_host)
// where bytes_rank is what the busiest rank moves over its link within the host, and bytes_host what the busiest
// host moves over its network links (both links stream at once, so the slower one sets the time). On a host with
// fewer cores than ranks (cores_per_host > 0), the ranks take turns on the cores: every term grows by the ratio.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

namespace mpcomm::tuning {

// One level's constants: seconds per algorithm step, and bytes per second.
struct LinkCost {
  double alpha_s = 0;
  double bw_Bps = 0;
};

// One backend's constants on one kind of machine.
struct BackendCosts {
  double overhead_s = 0;  // per call, whatever the size or the ranks
  LinkCost intra;         // between two ranks of a host; bw per rank
  LinkCost inter;         // between hosts; bw per host (all of its network links together)
  // Calibrated per op and size band (what the op's own rows of those sizes fitted: a backend runs other
  // algorithms, and the CPU's caches hold other sizes, as messages grow); an op not here uses the constants above.
  struct OpCosts {
    double below_bytes = std::numeric_limits<double>::infinity();  // the band: sizes under this, from the last's
    // The size the band's rows centre on (their geometric mean; 0: not known). A size between two bands' centres
    // is predicted by both, blended in log size.
    double at_bytes = 0;
    double overhead_s = 0;
    LinkCost intra, inter;
    bool has_intra = false, has_inter = false;
    std::string algorithm;  // the one whose structure fitted the band's rows best ("": the fastest)
    // Fitted to communicators of two ranks, which backends serve with algorithms of their own (the native
    // backend's single-copy pair exchange): used for two ranks, the other bands for more (and each kind for the
    // other where a backend has only one).
    bool pairs = false;
  };
  std::map<std::string, std::vector<OpCosts>> ops;  // each op's bands, smallest sizes first (pairs' apart)
  // The band of `op` that `bytes` on `ranks` ranks falls in (a pair's own where there are such), or null.
  const OpCosts* op_costs(const std::string& op, double bytes, int ranks) const;
  // The algorithms the backend runs; a prediction without one named takes the fastest of these for the op.
  std::vector<std::string> algorithms = {"ring", "tree", "hierarchical"};
  // An op whose ranks come to it from compute (a trainer's) is slower than back-to-back calls: its buffers
  // are out of the caches, and the ranks that came first went to sleep (a futex within a host, poll() across
  // hosts) and must be woken — on a virtual machine the longer a CPU idled, the slower it resumes. What
  // decides it is how long the ranks waited for the last one: fitted by calibration per op, within a host and
  // across hosts, to `mpcomm bench --compute-us` rows, each group of rows at the mean wait it measured: after a
  // mean wait of `wait_s`, the op takes warm·(1 + scale) + wake_s from the last arrival. Empty: no such rows (the
  // published profiles: a GPU's collective is a kernel that no CPU has to wake for).
  struct ColdCost {
    double wait_s = 0, scale = 0, wake_s = 0;
    bool across_hosts = false;
  };
  std::map<std::string, std::vector<ColdCost>> cold;  // per op: within a host, then across, each by wait
};

// Where the ranks are: `ranks` over `hosts` hosts, the same number on each.
struct CommShape {
  int ranks = 1;
  int hosts = 1;
  int cores_per_host = 0;  // 0: a core (or a GPU) per rank, never shared
  bool emulated = false;   // the hosts are emulated on one machine: all ranks share its cores_per_host cores
  int per_host() const { return ranks / hosts; }
  // Ranks beyond the cores take turns on them: every term of the time grows by this.
  double crowding() const;
};

// One phase's terms, before the constants (what the tests check by hand).
struct Phase {
  double steps_intra = 0, steps_inter = 0;
  double bytes_rank = 0, bytes_host = 0;
};

struct Prediction {
  double seconds = 0;
  std::string algorithm;
  std::vector<Phase> phases;
};

// The ops the model knows, and the algorithms it can compose for one (empty: unknown op).
const std::vector<std::string>& model_ops();
std::vector<std::string> algorithms_for(const std::string& op, const CommShape& shape);

// The phases of `algorithm` running `op` of `bytes` on `shape`. Throws InvalidArgument for an op or algorithm
// the model does not know, or one that cannot run on the shape (hierarchical on one host).
std::vector<Phase> phases(const std::string& op, const std::string& algorithm, double bytes, const CommShape& shape);

// The time of the phases under the constants.
double phase_seconds(const Phase& p, const LinkCost& intra, const LinkCost& inter);

// The constants `op` of `bytes` runs with on the backend: its band's where calibration fitted them, else the
// backend's.
struct OpConstants {
  double overhead_s = 0;
  LinkCost intra, inter;
};
OpConstants constants(const BackendCosts& costs, const std::string& op, double bytes, int ranks);

// The time of `op`: with `algorithm` "" the fastest the backend runs. Throws InvalidArgument naming what is
// wrong (unknown op, a shape that cannot be: ranks not a multiple of hosts, fewer than one).
Prediction predict(const BackendCosts& costs, const std::string& op, double bytes, const CommShape& shape,
                   const std::string& algorithm = "");

// The time of `op` on `shape` that takes `warm_s` back to back when its ranks waited `wait_s` (a mean over the
// ranks) for the last of them: the op's ColdCost at the shape's level (within one host, or across hosts; the
// other level's where calibration had none), interpolated in log wait between fitted ones, held beyond the
// largest, falling linearly to nothing (back to back) below the smallest. Without cold costs for the op, warm_s.
double after_wait(const BackendCosts& costs, const std::string& op, const CommShape& shape, double warm_s,
                  double wait_s);

// nccl-tests' bus bandwidth factor of op on n ranks (busbw = bytes / time × factor).
double bus_factor(const std::string& op, int ranks);

}  // namespace mpcomm::tuning
