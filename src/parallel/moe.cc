#include "parallel/moe.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "mpcomm/error.h"
#include "parallel/kernels.h"
#include "parallel/tp_layers.h"

namespace mpcomm::parallel {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

MoELayer::MoELayer(const MoEConfig& cfg, size_t C, const float* router, float* drouter,
                   std::vector<ExpertWeights> experts)
    : cfg_(cfg),
      C_(C),
      E_(static_cast<size_t>(cfg.experts)),
      K_(static_cast<size_t>(cfg.top_k)),
      El_(experts.size()),
      ranks_(cfg.ep == nullptr ? 1 : cfg.ep->size()),
      rank_(cfg.ep == nullptr ? 0 : cfg.ep->rank()),
      router_(router),
      drouter_(drouter),
      experts_(std::move(experts)) {
  if (E_ == 0 || K_ == 0 || K_ > E_ || El_ * static_cast<size_t>(ranks_) != E_)
    throw Internal("mixture of experts: " + std::to_string(E_) + " experts, top-" + std::to_string(K_) + ", " +
                   std::to_string(El_) + " on each of " + std::to_string(ranks_) + " expert-parallel ranks");
}

void MoELayer::exchange(const float* send, const std::vector<size_t>& send_rows, float* recv,
                        const std::vector<size_t>& recv_rows) {
  if (ranks_ == 1) {
    std::copy_n(send, send_rows[0] * C_, recv);
    if (cfg_.wire.bf16()) round_to_bf16(recv, send_rows[0] * C_);
    return;
  }
  std::vector<size_t> sc(send_rows.size()), sd(send_rows.size()), rc(recv_rows.size()), rd(recv_rows.size());
  size_t sat = 0, rat = 0;
  for (size_t p = 0; p < send_rows.size(); ++p) {
    sc[p] = send_rows[p] * C_, sd[p] = sat, sat += sc[p];
    rc[p] = recv_rows[p] * C_, rd[p] = rat, rat += rc[p];
  }
  auto t0 = std::chrono::steady_clock::now();
  if (cfg_.wire.bf16()) {
    std::vector<uint16_t> out(sat), in(rat);
    to_bf16(send, out.data(), sat);
    cfg_.ep->alltoallv(out.data(), sc, sd, in.data(), rc, rd, DataType::bfloat16);
    from_bf16(in.data(), recv, rat);
  } else {
    cfg_.ep->alltoallv(send, sc, sd, recv, rc, rd, DataType::float32);
  }
  if (cfg_.meter != nullptr)
    cfg_.meter->seconds += seconds_since(t0), cfg_.meter->bytes += cfg_.wire.bytes(sat), cfg_.meter->calls++;
}

void MoELayer::to_experts(const Saved& s, const float* by_rank, std::vector<std::vector<float>>& by_expert,
                          size_t width) {
  by_expert.assign(El_, {});
  for (size_t j = 0; j < El_; ++j) {
    size_t n = 0;
    for (int r = 0; r < ranks_; ++r) n += static_cast<size_t>(s.recv_counts[static_cast<size_t>(r) * El_ + j]);
    by_expert[j].resize(n * width);
  }
  std::vector<size_t> filled(El_, 0);
  for (int r = 0; r < ranks_; ++r)
    for (size_t j = 0; j < El_; ++j) {
      const size_t rows = static_cast<size_t>(s.recv_counts[static_cast<size_t>(r) * El_ + j]) * width;
      std::copy_n(by_rank, rows, by_expert[j].data() + filled[j]);
      by_rank += rows, filled[j] += rows;
    }
}

void MoELayer::from_experts(const Saved& s, const std::vector<std::vector<float>>& by_expert, float* by_rank,
                            size_t width) {
  std::vector<size_t> taken(El_, 0);
  for (int r = 0; r < ranks_; ++r)
    for (size_t j = 0; j < El_; ++j) {
      const size_t rows = static_cast<size_t>(s.recv_counts[static_cast<size_t>(r) * El_ + j]) * width;
      std::copy_n(by_expert[j].data() + taken[j], rows, by_rank);
      by_rank += rows, taken[j] += rows;
    }
}

double MoELayer::forward(Saved& s, float* y, const float* x, size_t R, size_t row0, size_t T) {
  const size_t C = C_, E = E_, K = K_, H = 4 * C_;
  s.R = R, s.row0 = row0, s.T = T;
  // router
  s.probs.resize(R * E);
  matmul_forward(s.probs.data(), x, router_, nullptr, R, C, E);
  for (size_t t = 0; t < R; ++t) {
    float* p = s.probs.data() + t * E;
    const float mx = *std::max_element(p, p + E);
    float sum = 0;
    for (size_t e = 0; e < E; ++e) sum += (p[e] = std::exp(p[e] - mx));
    for (size_t e = 0; e < E; ++e) p[e] /= sum;
  }
  // top-k, and the dispatch order: expert by expert, tokens in order (experts of rank d are d·El..)
  s.choice.resize(R * K);
  std::vector<std::vector<size_t>> assigned(E);  // (t·K + j) per expert
  for (size_t t = 0; t < R; ++t) {
    const float* p = s.probs.data() + t * E;
    for (size_t j = 0; j < K; ++j) {
      size_t best = E;
      for (size_t e = 0; e < E; ++e) {
        bool taken = false;
        for (size_t i = 0; i < j; ++i) taken = taken || s.choice[t * K + i] == static_cast<int32_t>(e);
        if (!taken && (best == E || p[e] > p[best])) best = e;
      }
      s.choice[t * K + j] = static_cast<int32_t>(best);
      assigned[best].push_back(t * K + j);
    }
  }
  s.position.assign(R * K, 0);
  s.send_rows.assign(static_cast<size_t>(ranks_), 0);
  s.expert_tokens.assign(E, 0);
  std::vector<float> send(R * K * C);
  std::vector<int64_t> counts(E);
  size_t at = 0;
  for (size_t e = 0; e < E; ++e) {
    counts[e] = s.expert_tokens[e] = static_cast<int64_t>(assigned[e].size());
    s.send_rows[e / El_] += assigned[e].size();
    for (size_t tj : assigned[e]) {
      s.position[tj] = at;
      std::copy_n(x + (tj / K) * C, C, send.data() + at * C);
      ++at;
    }
  }
  // every rank learns how many rows each rank sends for each of its experts
  s.recv_counts.assign(static_cast<size_t>(ranks_) * El_, 0);
  if (ranks_ == 1) {
    s.recv_counts = counts;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    cfg_.ep->alltoall(counts.data(), s.recv_counts.data(), El_, DataType::int64);
    if (cfg_.meter != nullptr)
      cfg_.meter->seconds += seconds_since(t0), cfg_.meter->bytes += E * sizeof(int64_t), cfg_.meter->calls++;
  }
  s.recv_rows.assign(static_cast<size_t>(ranks_), 0);
  size_t received = 0;
  for (int r = 0; r < ranks_; ++r)
    for (size_t j = 0; j < El_; ++j) {
      s.recv_rows[static_cast<size_t>(r)] += static_cast<size_t>(s.recv_counts[static_cast<size_t>(r) * El_ + j]);
      received += static_cast<size_t>(s.recv_counts[static_cast<size_t>(r) * El_ + j]);
    }
  std::vector<float> arrived(received * C);
  exchange(send.data(), s.send_rows, arrived.data(), s.recv_rows);
  // the experts
  to_experts(s, arrived.data(), s.in, C);
  s.h.assign(El_, {}), s.gelu.assign(El_, {});
  std::vector<std::vector<float>> outs(El_);
  for (size_t j = 0; j < El_; ++j) {
    const size_t n = s.in[j].size() / C;
    const ExpertWeights& w = experts_[j];
    s.h[j].resize(n * H), s.gelu[j].resize(n * H), outs[j].resize(n * C);
    if (n == 0) continue;
    matmul_forward(s.h[j].data(), s.in[j].data(), w.fc_w, w.fc_b, n, C, H);
    gelu_forward(s.gelu[j].data(), s.h[j].data(), n * H);
    matmul_forward(outs[j].data(), s.gelu[j].data(), w.proj_w, w.proj_b, n, H, C);
  }
  from_experts(s, outs, arrived.data(), C);
  s.out.resize(R * K * C);
  exchange(arrived.data(), s.recv_rows, s.out.data(), s.send_rows);
  // combine, the k outputs of a token in the router's order
  std::fill(y, y + R * C, 0.0f);
  for (size_t t = 0; t < R; ++t)
    for (size_t j = 0; j < K; ++j) {
      const float gate = s.probs[t * E + static_cast<size_t>(s.choice[t * K + j])];
      const float* o = s.out.data() + s.position[t * K + j] * C;
      for (size_t c = 0; c < C; ++c) y[t * C + c] += gate * o[c];
    }
  // load statistics per sequence: assignments and probability sums, over the sequence's rows on every
  // tensor-parallel rank (sequence parallelism cuts a micro-batch's rows over them)
  const size_t s0 = row0 / T, S = (row0 + R + T - 1) / T - s0;
  std::vector<float> stats(2 * S * E, 0.0f);  // [S,E] assignments, then [S,E] probability sums
  for (size_t t = 0; t < R; ++t) {
    const size_t q = (row0 + t) / T - s0;
    for (size_t j = 0; j < K; ++j) stats[q * E + static_cast<size_t>(s.choice[t * K + j])] += 1.0f;
    for (size_t e = 0; e < E; ++e) stats[S * E + q * E + e] += s.probs[t * E + e];
  }
  const float alpha = cfg_.aux_loss_coef * static_cast<float>(E);
  auto loss_of = [&](const float* count, const float* psum) {  // one sequence's α·E·Σ f·P
    double sum = 0;
    for (size_t e = 0; e < E; ++e)
      sum += static_cast<double>(count[e] / static_cast<float>(T * K)) * (psum[e] / static_cast<double>(T));
    return alpha * sum;
  };
  double aux = 0;
  if (cfg_.rows_tp != nullptr && cfg_.rows_tp->size() > 1) {
    // The micro-batch's sequences are cut over the tensor-parallel ranks' rows: sum every sequence's statistics
    // over them (a vector of all the micro-batch's sequences, the same on every rank).
    const size_t all = R * static_cast<size_t>(cfg_.rows_tp->size()) / T;
    std::vector<float> full(2 * all * E, 0.0f);
    for (size_t q = 0; q < S; ++q)
      for (size_t e = 0; e < E; ++e) {
        full[(s0 + q) * E + e] = stats[q * E + e];
        full[all * E + (s0 + q) * E + e] = stats[S * E + q * E + e];
      }
    cfg_.rows_tp->allreduce_sum_exact(full.data(), full.size());
    for (size_t q = 0; q < S; ++q)
      for (size_t e = 0; e < E; ++e) {
        stats[q * E + e] = full[(s0 + q) * E + e];
        stats[S * E + q * E + e] = full[all * E + (s0 + q) * E + e];
      }
    for (size_t q = 0; q < all; ++q) aux += loss_of(full.data() + q * E, full.data() + all * E + q * E);
  } else {
    for (size_t q = 0; q < S; ++q) aux += loss_of(stats.data() + q * E, stats.data() + S * E + q * E);
  }
  s.load.assign(S * E, 0.0f);
  for (size_t i = 0; i < S * E; ++i) s.load[i] = stats[i] / static_cast<float>(T * K);
  return aux;
}

void MoELayer::backward(Saved& s, float* dx, const float* dy, const float* x, float loss_scale) {
  const size_t C = C_, E = E_, K = K_, H = 4 * C_, R = s.R;
  // the gates' gradients, and the outputs' gradients to the experts
  std::vector<float> dprob(R * E, 0.0f), dsend(R * K * C);
  for (size_t t = 0; t < R; ++t)
    for (size_t j = 0; j < K; ++j) {
      const size_t e = static_cast<size_t>(s.choice[t * K + j]), at = s.position[t * K + j];
      const float gate = s.probs[t * E + e];
      const float* o = s.out.data() + at * C;
      float dot = 0;
      for (size_t c = 0; c < C; ++c) dot += dy[t * C + c] * o[c], dsend[at * C + c] = gate * dy[t * C + c];
      dprob[t * E + e] += dot;
    }
  size_t received = 0;
  for (size_t r : s.recv_rows) received += r;
  std::vector<float> arrived(received * C);
  exchange(dsend.data(), s.send_rows, arrived.data(), s.recv_rows);
  std::vector<std::vector<float>> douts, dins(El_);
  to_experts(s, arrived.data(), douts, C);
  for (size_t j = 0; j < El_; ++j) {
    const size_t n = s.in[j].size() / C;
    const ExpertWeights& w = experts_[j];
    dins[j].resize(n * C);
    if (n == 0) continue;
    std::vector<float> dgelu(n * H), dh(n * H);
    matmul_backward(dgelu.data(), w.dproj_w, w.dproj_b, douts[j].data(), s.gelu[j].data(), w.proj_w, n, H, C);
    gelu_backward(dh.data(), s.h[j].data(), dgelu.data(), n * H);
    matmul_backward(dins[j].data(), w.dfc_w, w.dfc_b, dh.data(), s.in[j].data(), w.fc_w, n, C, H);
  }
  from_experts(s, dins, arrived.data(), C);
  std::vector<float> dback(R * K * C);
  exchange(arrived.data(), s.recv_rows, dback.data(), s.send_rows);
  std::fill(dx, dx + R * C, 0.0f);
  for (size_t t = 0; t < R; ++t)
    for (size_t j = 0; j < K; ++j) accumulate(dx + t * C, dback.data() + s.position[t * K + j] * C, C);
  // the router: the load-balancing loss adds α·E·f[s,e]/(T·sequences) = α·E·f·loss_scale to dP/dp[t,e]
  const size_t s0 = s.row0 / s.T;
  const float alpha = cfg_.aux_loss_coef * static_cast<float>(E) * loss_scale;
  std::vector<float> dlogits(R * E);
  for (size_t t = 0; t < R; ++t) {
    const size_t q = (s.row0 + t) / s.T - s0;
    const float* p = s.probs.data() + t * E;
    float* d = dprob.data() + t * E;
    for (size_t e = 0; e < E; ++e) d[e] += alpha * s.load[q * E + e];
    float dot = 0;
    for (size_t e = 0; e < E; ++e) dot += p[e] * d[e];
    for (size_t e = 0; e < E; ++e) dlogits[t * E + e] = p[e] * (d[e] - dot);
  }
  std::vector<float> dxr(R * C);
  matmul_backward(dxr.data(), drouter_, nullptr, dlogits.data(), x, router_, R, C, E);
  accumulate(dx, dxr.data(), R * C);
}

}  // namespace mpcomm::parallel
