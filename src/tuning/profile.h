// A machine profile: the cost model's constants per backend (cost_model.h) and what the planner needs of the
// devices (peak FLOP/s, memory, ranks per host). Profiles are text; `mpcomm plan --calibrate` writes one for
// this machine, and the published ones (dgx-a100-ib200, dgx-h100-ndr400, h200-ndr400) are built in, their
// constants' sources in docs/planner.md.
//
//   mpcomm-profile 1
//   name = dgx-a100-ib200
//   description = 8 x A100 SXM per node (NVLink 3, NVSwitch), 8 x HDR 200 Gb/s InfiniBand per node
//   ranks_per_host = 8          # GPUs (or, for a CPU machine, the ranks one host runs)
//   cores_per_host = 0          # > 0: ranks beyond it share the cores (a CPU machine)
//   emulated_hosts = 0          # 1: its hosts were emulated on one machine, whose cores every rank shares
//   flops = 312e12              # per device, dense 16-bit peak
//   memory_gb = 80              # per device
//   mfu = 0.45                  # the fraction of peak the model's compute reaches (planner default)
//   default_backend = nccl
//   backend nccl overhead_us=8 intra_alpha_us=1 intra_bw_gbs=240 inter_alpha_us=5 inter_bw_gbs=192
//       algorithms=ring,tree
//   op native allreduce [pairs=1] [below_bytes=N] [at_bytes=N] overhead_us=... intra_alpha_us=...
//       intra_bw_gbs=... [inter_alpha_us=... inter_bw_gbs=...] [algorithm=ring]
//   cold native allreduce across_hosts=0 wait_us=300 scale=0.2 wake_us=40   # from compute (cost_model.h)
//
// (each backend or op entry one line in the file; a calibrated profile has an op line per size band).
// Bandwidths are GB/s (10^9 bytes): intra per rank, inter per host (all its network links together).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tuning/cost_model.h"

namespace mpcomm::tuning {

struct Profile {
  std::string name, description;
  int ranks_per_host = 0;
  int cores_per_host = 0;
  bool emulated_hosts = false;  // calibrated on hosts emulated on one machine (whose cores all ranks share)
  double flops = 0;             // FLOP/s per device; 0: not known (the planner refuses to plan on it)
  double memory_gb = 0;         // per device; 0: not known
  double mfu = 0.4;
  std::string default_backend;
  std::map<std::string, BackendCosts> backends;

  // The backend's constants; throws InvalidArgument naming the profile and the backends it has.
  const BackendCosts& backend(const std::string& name) const;
};

// Parses a profile; `origin` names it in errors ("profile FILE: line N: ..."). Every error names the field or
// line at fault: a backend line without one of its five numbers, a number that is not one, a key the format
// does not have, no name, no backend.
Profile parse_profile(const std::string& text, const std::string& origin);
std::string format_profile(const Profile& p);

// The built-in published profiles' names, and one of them by name (throws InvalidArgument listing them).
const std::vector<std::string>& published_profiles();
Profile published_profile(const std::string& name);

// A profile by name or path: a built-in name, "this-machine" (MPCOMM_PROFILE_DIR, else ~/.cache/mpcomm, file
// this-machine.profile, written by `mpcomm plan --calibrate`), or a file.
Profile load_profile(const std::string& name_or_path);
std::string this_machine_profile_path();

}  // namespace mpcomm::tuning
