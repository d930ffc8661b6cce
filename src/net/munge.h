// MUNGE, the credential service Slurm runs on every node: a process asks its local munged to vouch for its
// uid and gid over a payload (encode), any node's munged checks such a credential and says who made it
// (decode). libmunge is loaded when first needed (dlopen of libmunge.so.2), so that programs linking
// mpcomm run where MUNGE is not installed; only MUNGE mode needs it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace mpcomm::net::munge {

// Where munged listens: MPCOMM_MUNGE_SOCKET, else the socket= of AuthInfo in Slurm's configuration
// (SLURM_CONF, else /etc/slurm/slurm.conf), else "" (libmunge's default).
std::string socket_path();

// Whether credentials can be made here; *why says why not (libmunge missing, munged not answering).
bool available(std::string* why);

// A credential over `payload` from this process's uid; with `only_uid`, only that uid can decode it.
// Throws PeerFailure naming the socket and MUNGE's reason.
std::string encode(const std::vector<uint8_t>& payload, std::optional<uid_t> only_uid);

struct Decoded {
  std::vector<uint8_t> payload;
  uid_t uid = 0;
  gid_t gid = 0;
};
// Checks a credential with munged. Returns "" and fills *out, else MUNGE's reason (expired, replayed,
// invalid, not decodable by this uid...). Throws PeerFailure when munged cannot be asked at all.
std::string decode(const std::string& cred, Decoded* out);

// The job MUNGE credentials are bound to: "slurm/SLURM_JOB_ID", or "" outside a Slurm job.
std::string slurm_job();

}  // namespace mpcomm::net::munge
