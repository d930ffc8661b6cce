// mpcomm compare --report: a picture of one training step per backend. For each backend the demo trainer
// (4 ranks: tp 2 × pp 2, 4 micro-batches) runs a few steps with --trace, and plot_timeline.py, installed
// beside this executable, draws its last step: the pipeline bubble, the tensor-parallel all-reduces the
// compute waits for, the data-parallel and tied-embedding traffic at the end of the step.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench.h"

namespace mpcomm::cli {

std::string timeline_section(const std::vector<std::string>& backends, const std::string& dir) {
  const std::string exe = bench::self_exe_path();
  const std::string plot = exe.substr(0, exe.rfind('/')) + "/plot_timeline.py";
  const std::string shape = "-n 4 --tp 2 --pp 2 --micro-batches 4 --steps 6";
  std::string md =
      "## One training step per backend\n\nThe demo model (`mpcomm train " + shape +
      " --trace FILE`), its last step as every rank spent it: compute (forward, backward, optimizer) and each kind "
      "of traffic (tp: tensor-parallel all-reduces inside the layers; pp: activations and gradients between stages "
      "and the tied embedding's gradient; world: the loss). Open the JSON in ui.perfetto.dev for every op's bytes, "
      "algorithm and queued/started/ended times.\n\n";
  for (const std::string& b : backends) {
    if (b == "nccl") continue;  // the trainer's tensors live in host memory
    const std::string json = dir + "/timeline-" + b + ".json", png = dir + "/step-" + b + ".png";
    std::printf("\n######## one training step on %s, traced\n", b.c_str());
    std::fflush(stdout);
    const std::string train = "'" + exe + "' train " + shape + " --backend " + b + " --trace '" + json + "'";
    if (std::system(train.c_str()) != 0) {
      md += "- " + b + ": the traced training run failed (`" + train + "`)\n";
      continue;
    }
    const std::string draw = "/usr/bin/python3 '" + plot + "' '" + json + "' '" + png + "' --title 'one step of " +
                             shape + " on " + b + "' >/dev/null";
    if (std::system(draw.c_str()) != 0) {
      md += "- " + b + ": plotting failed (`" + draw + "`); the timeline is in timeline-" + b + ".json\n";
      continue;
    }
    md += "### " + b + "\n\n![one training step on " + b + "](step-" + b + ".png)\n\n";
  }
  return md;
}

}  // namespace mpcomm::cli
