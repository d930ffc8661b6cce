// mpcomm bench's mixture-of-experts rows: alltoallv and allgatherv with the uneven counts a router makes.
//
// A row of size S bytes is S / (token_elems · dtype) tokens per rank (each token a hidden vector of
// token_elems elements), one expert per rank. The router is skewed: rank p's experts draw a share of the
// tokens proportional to 1 / (k_p + 1)^imbalance, where k_p is p's place in a popularity order fixed by
// the seed (imbalance 0: every rank alike; 1: Zipf; larger: a few ranks get most). Each rank routes its
// own tokens with its own draw, so the counts differ per source too.
//   alltoallv (dispatch): rank r sends count[r][p] tokens to rank p;
//   allgatherv (gather dispatch, Megatron's allgather dispatcher): rank p contributes tokens_p, drawn the
//     same way from n · tokens per rank.
// Every rank computes the same matrix, so a row needs no exchange of counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpcomm::bench {

struct MoeCounts {
  // In elements; for allgatherv only send_counts[0] (this rank's) and recv_counts/recv_displs are used.
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_total = 0, recv_total = 0;
  // The busiest rank's received tokens over the mean: what the skew did.
  double max_over_mean = 1;
};

bool is_moe_op(const std::string& op);

// The counts `rank` of n uses for `op` (alltoallv or allgatherv), with `tokens` tokens per rank.
MoeCounts moe_counts(const std::string& op, int rank, int n, size_t tokens, size_t token_elems, double imbalance,
                     uint64_t seed = 2024);

// tokens[p] of `total` tokens drawn for n ranks from the skewed router distribution with stream `stream`.
std::vector<size_t> route_tokens(size_t total, int n, double imbalance, uint64_t seed, uint64_t stream);

}  // namespace mpcomm::bench
