#include "parallel/layout.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "mpcomm/error.h"

namespace mpcomm::parallel {

StageRange stage_range(int layers, int pp, int pp_rank) {
  StageRange s;
  int base = layers / pp, extra = layers % pp;
  s.first_layer = pp_rank * base + std::min(pp_rank, extra);
  s.end_layer = s.first_layer + base + (pp_rank < extra ? 1 : 0);
  s.first = pp_rank == 0;
  s.last = pp_rank == pp - 1;
  return s;
}

int padded_vocab(int vocab, int tp) { return (vocab + tp - 1) / tp * tp; }

std::vector<std::pair<std::string, std::vector<int64_t>>> full_model_tensors(const GPTConfig& c) {
  const int64_t C = c.hidden;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  t.push_back({"wte.weight", {c.vocab, C}});
  t.push_back({"wpe.weight", {c.positions, C}});
  for (int i = 0; i < c.layers; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    t.push_back({h + "ln_1.weight", {C}});
    t.push_back({h + "ln_1.bias", {C}});
    t.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    t.push_back({h + "attn.c_attn.bias", {3 * C}});
    t.push_back({h + "attn.c_proj.weight", {C, C}});
    t.push_back({h + "attn.c_proj.bias", {C}});
    t.push_back({h + "ln_2.weight", {C}});
    t.push_back({h + "ln_2.bias", {C}});
    if (!c.is_moe(i)) {
      t.push_back({h + "mlp.c_fc.weight", {C, 4 * C}});
      t.push_back({h + "mlp.c_fc.bias", {4 * C}});
      t.push_back({h + "mlp.c_proj.weight", {4 * C, C}});
      t.push_back({h + "mlp.c_proj.bias", {C}});
      continue;
    }
    t.push_back({router_name(i), {C, c.experts}});
    for (int e = 0; e < c.experts; ++e) {
      const std::string x = expert_prefix(i, e);
      t.push_back({x + "c_fc.weight", {C, 4 * C}});
      t.push_back({x + "c_fc.bias", {4 * C}});
      t.push_back({x + "c_proj.weight", {4 * C, C}});
      t.push_back({x + "c_proj.bias", {C}});
    }
  }
  t.push_back({"ln_f.weight", {C}});
  t.push_back({"ln_f.bias", {C}});
  return t;
}

std::string router_name(int layer) { return "h." + std::to_string(layer) + ".mlp.router.weight"; }
std::string expert_prefix(int layer, int expert) {
  return "h." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + ".";
}

namespace {

// The expert of "h.<i>.mlp.experts.<e>.…", or -1.
int expert_of(const std::string& name) {
  const auto at = name.find(".mlp.experts.");
  return at == std::string::npos ? -1 : std::stoi(name.substr(at + 13));
}

Split split_of(const std::string& name) {
  auto ends = [&](const char* s) {
    std::string suf(s);
    return name.size() >= suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
  };
  if (name == "wte.weight") return Split::vocab_rows;
  if (expert_of(name) >= 0 || ends(".mlp.router.weight")) return Split::replicated;
  if (ends("attn.c_attn.weight") || ends("attn.c_attn.bias")) return Split::qkv_cols;
  if (ends("mlp.c_fc.weight") || ends("mlp.c_fc.bias")) return Split::cols;
  if (ends("attn.c_proj.weight") || ends("mlp.c_proj.weight")) return Split::rows;
  return Split::replicated;
}

// The layer index of "h.<i>.…", or -1.
int layer_of(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return -1;
  return std::stoi(name.substr(2));
}

}  // namespace

ShardLayout::ShardLayout(const GPTConfig& cfg, int tp, int tp_rank, int pp, int pp_rank, int ep, int ep_rank)
    : cfg_(cfg), tp_(tp), tp_rank_(tp_rank), ep_(ep), ep_rank_(ep_rank), stage_(stage_range(cfg.layers, pp, pp_rank)) {
  const auto all = full_model_tensors(cfg);
  for (bool experts : {false, true}) {
    for (auto& [name, shape] : all) {
      const int layer = layer_of(name), expert = expert_of(name);
      if ((expert >= 0) != experts) continue;
      bool held = layer >= 0             ? (layer >= stage_.first_layer && layer < stage_.end_layer)
                  : name == "wte.weight" ? (stage_.first || stage_.last)
                  : name == "wpe.weight" ? stage_.first
                                         : stage_.last;  // ln_f
      if (expert >= 0) held = held && expert >= first_expert() && expert < first_expert() + local_experts();
      if (held) add(name, shape, split_of(name));
      if (held && experts) params_.back().expert = true;
    }
    if (!experts) dense_total_ = total_;
  }
}

void ShardLayout::add(const std::string& name, std::vector<int64_t> full, Split split) {
  ParamSpec p;
  p.name = name;
  p.full_shape = full;
  p.split = split;
  p.local_shape = full;
  switch (split) {
    case Split::replicated: break;
    case Split::rows: p.local_shape[0] /= tp_; break;
    case Split::cols:
    case Split::qkv_cols: p.local_shape.back() /= tp_; break;
    case Split::vocab_rows: p.local_shape[0] = padded_vocab(cfg_.vocab, tp_) / tp_; break;
  }
  p.numel = 1;
  for (auto d : p.local_shape) p.numel *= static_cast<size_t>(d);
  p.offset = total_;
  total_ += p.numel;
  params_.push_back(std::move(p));
}

bool ShardLayout::has(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return true;
  return false;
}

const ParamSpec& ShardLayout::at(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw Internal("parallel layout: this rank (tp " + std::to_string(tp_rank_) + ", layers " +
                 std::to_string(stage_.first_layer) + ".." + std::to_string(stage_.end_layer) +
                 ") holds no parameter '" + name + "'");
}

std::vector<Segment> ShardLayout::segments(const ParamSpec& p) const {
  std::vector<Segment> s;
  const size_t t = static_cast<size_t>(tp_rank_);
  // A 1-D tensor is one row.
  const size_t rows = p.full_shape.size() == 2 ? static_cast<size_t>(p.full_shape[0]) : 1;
  const size_t cols = static_cast<size_t>(p.full_shape.back());
  switch (p.split) {
    case Split::replicated: s.push_back({0, 0, p.numel}); break;
    case Split::rows: s.push_back({t * p.numel, 0, p.numel}); break;
    case Split::vocab_rows: {
      // Local row r is padded-vocabulary row t*Vl + r; rows past the real vocabulary stay zero.
      size_t vl = static_cast<size_t>(p.local_shape[0]), first = t * vl;
      size_t real = first >= rows ? 0 : std::min(vl, rows - first);
      if (real > 0) s.push_back({first * cols, 0, real * cols});
      break;
    }
    case Split::cols: {
      size_t lc = cols / static_cast<size_t>(tp_);
      for (size_t r = 0; r < rows; ++r) s.push_back({r * cols + t * lc, r * lc, lc});
      break;
    }
    case Split::qkv_cols: {
      // Columns are [q | k | v], each C wide; this rank takes the same heads from each.
      size_t c = cols / 3, lc = c / static_cast<size_t>(tp_);
      for (size_t r = 0; r < rows; ++r)
        for (size_t part = 0; part < 3; ++part)
          s.push_back({r * cols + part * c + t * lc, r * 3 * lc + part * lc, lc});
      break;
    }
  }
  return s;
}

void init_params(const ShardLayout& layout, uint64_t seed, float* params) {
  const auto& cfg = layout.config();
  const auto all = full_model_tensors(cfg);
  for (const auto& p : layout.params()) {
    size_t index = 0;
    while (all[index].first != p.name) ++index;
    size_t full_numel = 1;
    for (auto d : p.full_shape) full_numel *= static_cast<size_t>(d);
    std::vector<float> full(full_numel);
    auto contains = [&](const char* s) { return p.name.find(s) != std::string::npos; };
    if (contains("ln_") && contains(".weight")) {
      std::fill(full.begin(), full.end(), 1.0f);
    } else if (contains(".bias")) {
      std::fill(full.begin(), full.end(), 0.0f);
    } else {
      double stddev = contains("c_proj.weight") ? 0.02 / std::sqrt(2.0 * cfg.layers) : 0.02;
      std::mt19937_64 rng(seed * 1000003ull + index);
      // Box-Muller on 53-bit uniforms: the same numbers with any standard library.
      auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
      for (size_t i = 0; i < full_numel; i += 2) {
        double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
        full[i] = static_cast<float>(stddev * r * std::cos(a));
        if (i + 1 < full_numel) full[i + 1] = static_cast<float>(stddev * r * std::sin(a));
      }
    }
    float* local = params + p.offset;
    std::fill(local, local + p.numel, 0.0f);
    for (const auto& s : layout.segments(p)) std::copy_n(full.data() + s.full_offset, s.len, local + s.local_offset);
  }
}

}  // namespace mpcomm::parallel
