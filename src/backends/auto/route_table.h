// The auto backend's table: which backend runs each call. Its rows are a selection table's
// (tuning/selection_table.h) in a section "backend=auto"; a row's subject is an op ("sendrecv" for
// sends and receives, whose two ends must route alike) and its choice a backend:
//
//   mpcomm-tuning 1 backend=auto machine=Intel_Xeon_Platinum_8481C.c2.g0.h1
//   allreduce hosts=1 ranks=8 bytes=[1M,4M) -> mpi at=2M us=native:301,gloo:2950,mpi:190
//   allreduce -> native
//
// Where it comes from, decided on rank 0 only (the others take rank 0's text, so every rank routes alike
// even when their files differ), the first that has an auto section for this machine:
//  1. the MPCOMM_TUNING file;
//  2. the table `mpcomm tune --backends all` stored for this machine: $XDG_CACHE_HOME/mpcomm/tables/
//     FINGERPRINT.table (~/.cache when XDG_CACHE_HOME is unset);
//  3. the built-in table (builtin_table.cc), measured on the machine its header names.
// A table whose header names another machine is passed over with a warning; a malformed one is an
// InvalidArgument naming the file, line and field.
#pragma once

#include <string>
#include <vector>

#include "tuning/selection_table.h"

namespace mpcomm::autosel {

// The subjects: index k is op k's ("allreduce", ...; send's is "sendrecv", recv routes by it too; split
// has none); the choices are backend names.
const tuning::Vocabulary& vocabulary();
int subject_of(OpKind op);
std::string_view builtin_table_text();

// This machine as tables name it: CPU model, online CPUs, GPUs, and the job's hosts,
// "Intel_Xeon_Platinum_8481C.c2.g0.h1" (letters, digits, '_' and '.': a file name).
std::string machine_fingerprint(int hosts);
// Where `mpcomm tune --backends all` stores the table of `fingerprint`.
std::string cache_path(const std::string& fingerprint);

// The text of the table in use and what `mpcomm info` and the log say of it.
struct TableChoice {
  std::string text;                   // one section (or more) in the format of table_format.cc
  std::string source;                 // "tuning file PATH", "the stored table PATH", "the built-in table"
  std::string machine;                // the fingerprint its header names
  std::vector<std::string> warnings;  // tables passed over, and why
};
// Rank 0's choice (also `mpcomm info`'s). `tuning_file`: MPCOMM_TUNING's value.
TableChoice choose_table(const std::string& tuning_file, int hosts);

}  // namespace mpcomm::autosel
