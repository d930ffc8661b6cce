#include "tuning/calibrate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "mpcomm/error.h"

namespace mpcomm::tuning {
namespace {

// The size bands a backend's constants are fitted in, a factor of 4 apart: the native backend changes
// algorithms, and a message outgrows the CPU's caches (per-core L2, the shared L3), within a few such steps.
const double kBands[] = {16 << 10, 64 << 10, 256 << 10, 1 << 20,
                         4 << 20,  16 << 20, 64 << 20,  std::numeric_limits<double>::infinity()};

std::string band_name(double from, double below) {
  auto h = [](double b) {
    return b >= (1 << 20) ? std::to_string(static_cast<long long>(b) >> 20) + "M"
                          : std::to_string(static_cast<long long>(b) >> 10) + "K";
  };
  return "[" + (from == 0 ? std::string("0") : h(from)) + "," + (std::isfinite(below) ? h(below) : "inf") + ")";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Solves the square system a·c = b by Gaussian elimination with partial pivoting; false when singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* c) {
  const size_t n = b.size();
  for (size_t i = 0; i < n; ++i) {
    size_t p = i;
    for (size_t r = i + 1; r < n; ++r)
      if (std::fabs(a[r][i]) > std::fabs(a[p][i])) p = r;
    if (std::fabs(a[p][i]) < 1e-300) return false;
    std::swap(a[i], a[p]);
    std::swap(b[i], b[p]);
    for (size_t r = i + 1; r < n; ++r) {
      const double f = a[r][i] / a[i][i];
      for (size_t k = i; k < n; ++k) a[r][k] -= f * a[i][k];
      b[r] -= f * b[i];
    }
  }
  c->assign(n, 0);
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= a[i][k] * (*c)[k];
    (*c)[i] = s / a[i][i];
  }
  return true;
}

struct Cores {
  int per_host = 0;
  bool emulated = false;
};

CommShape shape_of(const Measurement& m, const Cores& c) { return CommShape{m.ranks, m.hosts, c.per_host, c.emulated}; }

struct OpFit {
  BackendCosts::OpCosts costs;
  double error = std::numeric_limits<double>::infinity();
  int rows = 0;
};

double rel_error(const BackendCosts& c, const std::string& op, const Measurement& m, const Cores& cores) {
  const double p = predict(c, op, m.bytes, shape_of(m, cores)).seconds;
  return (p - m.seconds) / m.seconds;
}

// The within-host fit of one op's band for one algorithm structure: overhead, α, 1/bw — or, with `held`
// (a band of a single size, whose rows cannot tell α from β), 1/bw alone, the overhead and α the held band's.
OpFit fit_intra(const std::string& op, const std::string& algorithm, const std::vector<Measurement>& rows,
                const Cores& cores, const BackendCosts::OpCosts* held) {
  std::vector<std::vector<double>> x;
  std::vector<double> y, w;
  for (const auto& m : rows) {
    const CommShape s = shape_of(m, cores);
    double steps = 0, bytes = 0;
    for (const auto& p : phases(op, algorithm, m.bytes, s)) steps += p.steps_intra, bytes += p.bytes_rank;
    const double t = m.seconds / s.crowding();
    if (held) {
      x.push_back({bytes});
      y.push_back(std::max(0.0, t - held->overhead_s - steps * held->intra.alpha_s));
    } else {
      x.push_back({1, steps, bytes});
      y.push_back(t);
    }
    w.push_back(1 / t);
  }
  auto c = nonnegative_least_squares(x, y, w);
  if (held) c = {held->overhead_s, held->intra.alpha_s, c[0]};
  OpFit f;
  f.rows = static_cast<int>(rows.size());
  f.costs.overhead_s = c[0];
  f.costs.intra = {c[1], c[2] > 0 ? 1 / c[2] : 1e30};
  f.costs.has_intra = true;
  f.costs.algorithm = algorithm;
  BackendCosts b;
  b.ops[op] = {f.costs};
  std::vector<double> e;
  for (const auto& m : rows) e.push_back(std::fabs(rel_error(b, op, m, cores)));
  f.error = median(e);
  return f;
}

// Between hosts, the within-host constants held: α between hosts and 1/bw per host (1/bw alone, α the held
// band's, when the rows are of one size).
void fit_inter(const std::string& op, OpFit* f, const std::vector<Measurement>& rows, const Cores& cores,
               const BackendCosts::OpCosts* held) {
  std::vector<std::vector<double>> x;
  std::vector<double> y, w;
  const std::string algorithm = f->costs.algorithm;
  for (const auto& m : rows) {
    const CommShape s = shape_of(m, cores);
    double known = f->costs.overhead_s, steps = 0, bytes = 0;
    for (const auto& p : phases(op, algorithm, m.bytes, s)) {
      known += p.steps_intra * f->costs.intra.alpha_s;
      steps += p.steps_inter;
      if (p.bytes_host > 0)
        bytes += p.bytes_host;  // the slower link sets a mixed phase's time
      else
        known += p.bytes_rank / f->costs.intra.bw_Bps;
    }
    const double t = m.seconds / s.crowding();
    if (held) {
      x.push_back({bytes});
      y.push_back(std::max(0.0, t - known - steps * held->inter.alpha_s));
    } else {
      x.push_back({steps, bytes});
      y.push_back(std::max(0.0, t - known));
    }
    w.push_back(1 / t);
  }
  auto c = nonnegative_least_squares(x, y, w);
  if (held) c = {held->inter.alpha_s, c[0]};
  f->costs.inter = {c[0], c[1] > 0 ? 1 / c[1] : 1e30};
  f->costs.has_inter = true;
}

// The cold cost of one op and level at one mean wait (one bench run's rows): what the rows took beyond `costs`'
// back-to-back prediction, as scale·warm + wake (warm: the prediction).
BackendCosts::ColdCost fit_cold(const BackendCosts& costs, bool across, double wait_s,
                                const std::vector<Measurement>& rows, const Cores& cores, double* error) {
  std::vector<std::vector<double>> x;
  std::vector<double> y, w, warm;
  for (const auto& m : rows) {
    warm.push_back(predict(costs, m.op, m.bytes, shape_of(m, cores)).seconds);
    x.push_back({warm.back(), 1});
    y.push_back(m.seconds - warm.back());
    w.push_back(1 / m.seconds);
  }
  const auto c = nonnegative_least_squares(x, y, w);
  BackendCosts::ColdCost k{wait_s, c[0], c[1], across};
  std::vector<double> e;
  for (size_t i = 0; i < rows.size(); ++i)
    e.push_back(std::fabs(warm[i] * (1 + k.scale) + k.wake_s - rows[i].seconds) / rows[i].seconds);
  *error = median(e);
  return k;
}

size_t distinct_sizes(const std::vector<Measurement>& rows) {
  std::set<double> s;
  for (const auto& m : rows) s.insert(m.bytes);
  return s.size();
}

}  // namespace

std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                                              const std::vector<double>& w) {
  const size_t k = x.empty() ? 0 : x[0].size();
  std::vector<bool> free(k, true);
  std::vector<double> c(k, 0);
  // An active set: a coefficient that comes out negative is held at 0 and the rest fitted again.
  for (size_t round = 0; round <= k; ++round) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < k; ++j)
      if (free[j]) cols.push_back(j);
    if (cols.empty()) break;
    std::vector<std::vector<double>> a(cols.size(), std::vector<double>(cols.size(), 0));
    std::vector<double> b(cols.size(), 0), sol;
    for (size_t i = 0; i < y.size(); ++i) {
      const double ww = w[i] * w[i];
      for (size_t p = 0; p < cols.size(); ++p) {
        b[p] += ww * x[i][cols[p]] * y[i];
        for (size_t q = 0; q < cols.size(); ++q) a[p][q] += ww * x[i][cols[p]] * x[i][cols[q]];
      }
    }
    // A column that is 0 in every row, or a multiple of an earlier one (sendrecv's one step is the call's
    // overhead again), cannot be told apart: hold it at 0.
    bool dropped = false;
    for (size_t p = 0; p < cols.size() && !dropped; ++p) {
      if (a[p][p] == 0) free[cols[p]] = false, dropped = true;
      for (size_t q = 0; q < p && !dropped; ++q)
        if (a[p][q] * a[p][q] >= a[p][p] * a[q][q] * (1 - 1e-12)) free[cols[p]] = false, dropped = true;
    }
    if (dropped) continue;
    if (!solve(a, b, &sol)) {
      free[cols.back()] = false;
      continue;
    }
    size_t worst = cols.size();
    for (size_t p = 0; p < cols.size(); ++p)
      if (sol[p] < 0 && (worst == cols.size() || sol[p] < sol[worst])) worst = p;
    if (worst == cols.size()) {
      std::fill(c.begin(), c.end(), 0);
      for (size_t p = 0; p < cols.size(); ++p) c[cols[p]] = sol[p];
      return c;
    }
    free[cols[worst]] = false;
  }
  return std::vector<double>(k, 0);
}

Profile calibrate(const std::vector<Measurement>& rows, const std::string& name, int ranks_per_host, int cores_per_host,
                  bool emulated_hosts, CalibrationReport* report) {
  const Cores cores{cores_per_host, emulated_hosts};
  CalibrationReport local;
  CalibrationReport& r = report ? *report : local;
  std::map<std::string, std::map<std::string, std::vector<Measurement>>> by;  // backend -> op -> rows
  // backend -> (op, across hosts, compute) -> rows measured after compute (a bench run's, which share a mean wait)
  std::map<std::string, std::map<std::tuple<std::string, bool, double>, std::vector<Measurement>>> cold;
  for (const auto& m : rows) {
    if (algorithms_for(m.op, CommShape{}).empty()) {
      r.skipped.push_back(m.backend + " " + m.op + ": the model has no such op");
    } else if (m.seconds <= 0 || m.ranks < 2 || m.hosts < 1 || m.ranks % m.hosts) {
      r.skipped.push_back(m.backend + " " + m.op + " " + std::to_string(m.ranks) + " ranks over " +
                          std::to_string(m.hosts) + " hosts: not a row the model can fit");
    } else if (m.compute_s > 0 && shape_of(m, cores).crowding() > 1) {
      // Ranks that share a core also share its compute: when each arrives, and so the time from the last arrival,
      // is the scheduler's, not the op's.
      r.skipped.push_back(m.backend + " " + m.op + " " + std::to_string(m.ranks) + " ranks over " +
                          std::to_string(m.hosts) + " hosts after compute: more ranks than cores");
    } else if (m.compute_s > 0) {
      cold[m.backend][{m.op, m.hosts > 1, m.compute_s}].push_back(m);
    } else {
      by[m.backend][m.op].push_back(m);
    }
  }
  Profile p;
  p.name = name;
  p.ranks_per_host = ranks_per_host;
  p.cores_per_host = cores_per_host;
  p.emulated_hosts = emulated_hosts;
  for (const auto& [backend, ops] : by) {
    BackendCosts costs;
    for (const auto& [op, all] : ops)
      for (bool pairs : {true, false}) {
        std::vector<Measurement> list;
        for (const auto& m : all)
          if ((m.ranks == 2) == pairs) list.push_back(m);
        if (list.empty()) continue;
        std::vector<BackendCosts::OpCosts> bands;
        double from = 0;
        std::vector<Measurement> one, many;  // a first band of one size is carried into the next
        double band_from = 0;
        for (double below : kBands) {
          for (const auto& m : list)
            if (m.bytes >= from && m.bytes < below) (m.hosts == 1 ? one : many).push_back(m);
          from = below;
          if (one.empty()) continue;  // the band below (or above, for the first) covers these sizes
          const BackendCosts::OpCosts* held = distinct_sizes(one) < 2 && !bands.empty() ? &bands.back() : nullptr;
          if (distinct_sizes(one) < 2 && !held) continue;
          const std::string band = band_name(band_from, below);
          band_from = below;
          OpFit best;
          for (const auto& a : algorithms_for(op, CommShape{2, 1}))
            if (auto f = fit_intra(op, a, one, cores, held); f.error < best.error) best = f;
          r.fits.push_back(
              {backend, op, (pairs ? "2 ranks " : "") + band, "intra", best.costs.algorithm, best.rows, best.error});
          if (!many.empty()) {
            const bool hold = distinct_sizes(many) < 2 && !bands.empty() && bands.back().has_inter;
            fit_inter(op, &best, many, cores, hold ? &bands.back() : nullptr);
            BackendCosts b;
            b.ops[op] = {best.costs};
            std::vector<double> e;
            for (const auto& m : many) e.push_back(std::fabs(rel_error(b, op, m, cores)));
            r.fits.push_back({backend, op, (pairs ? "2 ranks " : "") + band, "inter", best.costs.algorithm,
                              static_cast<int>(many.size()), median(e)});
          } else if (!bands.empty() && bands.back().has_inter) {
            best.costs.inter = bands.back().inter, best.costs.has_inter = true;
          }
          best.costs.below_bytes = below;
          double logs = 0;
          for (const auto& m : one) logs += std::log(m.bytes);
          best.costs.at_bytes = std::round(std::exp(logs / static_cast<double>(one.size())));
          bands.push_back(best.costs);
          one.clear(), many.clear();
        }
        if (bands.empty()) {
          r.skipped.push_back(backend + " " + op + (pairs ? " (2 ranks)" : " (3 ranks or more)") +
                              ": no size band has rows of two sizes on one host");
          continue;
        }
        bands.back().below_bytes = std::numeric_limits<double>::infinity();
        for (auto& b : bands) b.pairs = pairs;
        auto& into = costs.ops[op];
        into.insert(into.end(), bands.begin(), bands.end());
      }
    if (costs.ops.empty()) continue;
    // The smallest sizes' band (of more than two ranks where there is one): what a call pays whatever else it does.
    const auto& list = costs.ops.count("allreduce") ? costs.ops.at("allreduce") : costs.ops.begin()->second;
    auto more = std::find_if(list.begin(), list.end(), [](const BackendCosts::OpCosts& b) { return !b.pairs; });
    const auto& base = more != list.end() ? *more : list.front();
    costs.overhead_s = base.overhead_s;
    costs.intra = base.intra;
    // Without rows between hosts the backend's inter constants are unknown; the within-host ones stand in,
    // which a prediction across hosts then says nothing true about (the report says which ops have them).
    costs.inter = base.has_inter ? base.inter : base.intra;
    costs.algorithms = {"ring", "tree", "hierarchical"};
    for (const auto& [key, list] : cold[backend]) {
      // Named apart, not as a structured binding: the lambda below captures `across`, which C++17 compilers refuse.
      const std::string& op = std::get<0>(key);
      const bool across = std::get<1>(key);
      const double compute = std::get<2>(key);
      double wait = 0;
      for (const auto& m : list) wait += m.wait_s / static_cast<double>(list.size());
      auto& into = costs.cold[op];
      // Within a host first, then across, each level by wait.
      const auto after = std::find_if(into.begin(), into.end(), [&](const BackendCosts::ColdCost& k) {
        return k.across_hosts == across ? k.wait_s >= wait : k.across_hosts;
      });
      if (!(wait > 0) || (after != into.end() && after->across_hosts == across && after->wait_s == wait)) {
        r.skipped.push_back(backend + " " + op + " after " + std::to_string(std::llround(compute * 1e6)) +
                            " us of compute: no wait measured, or the same as another run's");
        continue;
      }
      double error = 0;
      into.insert(after, fit_cold(costs, across, wait, list, cores, &error));
      r.fits.push_back({backend, op, "waited " + std::to_string(std::llround(wait * 1e6)) + " us",
                        across ? "cold, across hosts" : "cold, one host", "", static_cast<int>(list.size()), error});
    }
    p.backends[backend] = costs;
  }
  // Rows after compute of a backend without back-to-back rows have no warm time to be measured against.
  for (const auto& [backend, groups] : cold)
    if (!p.backends.count(backend))
      for (const auto& [key, list] : groups)
        r.skipped.push_back(backend + " " + std::get<0>(key) + " after compute (" + std::to_string(list.size()) +
                            " rows): the backend has no back-to-back rows to fit first");
  if (p.backends.empty())
    throw InvalidArgument(
        "mpcomm plan --calibrate: no backend has rows of two sizes on one host (α and β cannot be told apart)");
  p.default_backend = p.backends.count("native") ? "native" : p.backends.begin()->first;
  return p;
}

Validation validate(const Profile& p, const std::vector<Measurement>& rows) {
  Validation v;
  std::vector<double> errors;
  for (const auto& m : rows) {
    if (!p.backends.count(m.backend) || algorithms_for(m.op, CommShape{}).empty() || !(m.seconds > 0) || m.ranks < 1 ||
        m.hosts < 1 || m.ranks % m.hosts)
      continue;
    // Rows after compute with more ranks than cores: when their ranks arrive is the scheduler's (calibration
    // leaves them out too).
    if (m.compute_s > 0 && CommShape{m.ranks, m.hosts, p.cores_per_host, p.emulated_hosts}.crowding() > 1) continue;
    const auto& costs = p.backends.at(m.backend);
    auto pred = predict(costs, m.op, m.bytes, CommShape{m.ranks, m.hosts, p.cores_per_host, p.emulated_hosts});
    if (m.compute_s > 0) pred.seconds = after_wait(costs, m.op, CommShape{m.ranks, m.hosts}, pred.seconds, m.wait_s);
    Validation::Row row{m, pred.seconds, (pred.seconds - m.seconds) / m.seconds, pred.algorithm};
    errors.push_back(std::fabs(row.rel_error));
    v.rows.push_back(row);
  }
  v.median_abs_error = median(errors);
  v.max_abs_error = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  return v;
}

}  // namespace mpcomm::tuning
