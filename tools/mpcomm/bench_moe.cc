#include "bench_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mpcomm::bench {

namespace {

// splitmix64: a small, fixed generator, so every rank draws the same numbers on every machine.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// The router's probability per rank: Zipf over a popularity order drawn from the seed.
std::vector<double> router_weights(int n, double imbalance, uint64_t seed) {
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng{seed};
  for (int i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[rng.next() % static_cast<uint64_t>(i + 1)]);
  std::vector<double> w(static_cast<size_t>(n));
  double sum = 0;
  for (int k = 0; k < n; ++k)
    sum += w[static_cast<size_t>(order[static_cast<size_t>(k)])] = std::pow(k + 1.0, -imbalance);
  for (double& x : w) x /= sum;
  return w;
}

}  // namespace

bool is_moe_op(const std::string& op) { return op == "alltoallv" || op == "allgatherv"; }

std::vector<size_t> route_tokens(size_t total, int n, double imbalance, uint64_t seed, uint64_t stream) {
  const std::vector<double> w = router_weights(n, imbalance, seed);
  std::vector<double> cdf(w.size());
  std::partial_sum(w.begin(), w.end(), cdf.begin());
  std::vector<size_t> out(static_cast<size_t>(n), 0);
  Rng rng{seed ^ (stream * 0x632be59bd9b4e019ull + 1)};
  for (size_t t = 0; t < total; ++t) {
    const double u = rng.uniform();
    const size_t p = static_cast<size_t>(std::upper_bound(cdf.begin(), cdf.end() - 1, u) - cdf.begin());
    ++out[p];
  }
  return out;
}

MoeCounts moe_counts(const std::string& op, int rank, int n, size_t tokens, size_t token_elems, double imbalance,
                     uint64_t seed) {
  MoeCounts m;
  const size_t N = static_cast<size_t>(n), me = static_cast<size_t>(rank);
  std::vector<size_t> received(N, 0);  // tokens each rank receives (alltoallv) or contributes (allgatherv)
  m.recv_counts.assign(N, 0);
  m.recv_displs.assign(N, 0);
  if (op == "alltoallv") {
    std::vector<std::vector<size_t>> matrix(N);
    for (size_t r = 0; r < N; ++r) {
      matrix[r] = route_tokens(tokens, n, imbalance, seed, r);
      for (size_t p = 0; p < N; ++p) received[p] += matrix[r][p];
    }
    m.send_counts.resize(N), m.send_displs.resize(N);
    for (size_t p = 0; p < N; ++p) {
      m.send_counts[p] = matrix[me][p] * token_elems;
      m.send_displs[p] = m.send_total;
      m.send_total += m.send_counts[p];
      m.recv_counts[p] = matrix[p][me] * token_elems;
      m.recv_displs[p] = m.recv_total;
      m.recv_total += m.recv_counts[p];
    }
  } else {
    received = route_tokens(tokens * N, n, imbalance, seed, N);
    for (size_t p = 0; p < N; ++p) {
      m.recv_counts[p] = received[p] * token_elems;
      m.recv_displs[p] = m.recv_total;
      m.recv_total += m.recv_counts[p];
    }
    m.send_counts = {m.recv_counts[me]};
    m.send_total = m.recv_counts[me];
  }
  const double mean = static_cast<double>(tokens);
  m.max_over_mean = mean > 0 ? static_cast<double>(*std::max_element(received.begin(), received.end())) / mean : 1;
  return m;
}

}  // namespace mpcomm::bench
