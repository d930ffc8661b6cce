#include "parallel/checkpoint.h"

#include <algorithm>
#include <regex>
#include <set>

#include "mpcomm/error.h"

namespace mpcomm::parallel {

namespace {

// The checkpoint's names without the optional "transformer." prefix, mapped to the names in the file.
std::map<std::string, std::string> model_names(const SafetensorsFile& file) {
  static const std::regex ignored(R"((transformer\.)?(lm_head\.weight|h\.\d+\.attn\.(masked_)?bias))");
  std::map<std::string, std::string> names;
  for (const auto& [name, info] : file.tensors()) {
    if (std::regex_match(name, ignored)) continue;
    std::string bare = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    names[bare] = name;
  }
  return names;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

GPTConfig checkpoint_config(const SafetensorsFile& file) {
  auto names = model_names(file);
  auto shape = [&](const std::string& n) {
    auto it = names.find(n);
    if (it == names.end()) throw InvalidArgument("checkpoint " + file.path() + ": no tensor '" + n + "'");
    const auto& s = file.info(it->second).shape;
    if (s.size() != 2) throw InvalidArgument("checkpoint " + file.path() + ": '" + n + "' has shape " + shape_str(s) + ", want 2 dimensions");
    return s;
  };
  GPTConfig c;
  auto wte = shape("wte.weight"), wpe = shape("wpe.weight");
  c.vocab = static_cast<int>(wte[0]);
  c.hidden = static_cast<int>(wte[1]);
  c.positions = static_cast<int>(wpe[0]);
  std::set<int> layers;
  static const std::regex layer(R"(h\.(\d+)\..*)");
  for (const auto& [n, _] : names) {
    std::smatch m;
    if (std::regex_match(n, m, layer)) layers.insert(std::stoi(m[1]));
  }
  c.layers = static_cast<int>(layers.size());
  // Mixture of experts: the layers with a router; its columns are the experts. The first such layer gives the
  // period (check_checkpoint then finds any layer out of it).
  static const std::regex router(R"(h\.(\d+)\.mlp\.router\.weight)");
  int first_moe = -1;
  for (const auto& [n, name] : names) {
    std::smatch m;
    if (!std::regex_match(n, m, router)) continue;
    const int layer = std::stoi(m[1]);
    if (first_moe < 0 || layer < first_moe) first_moe = layer;
    const auto& s = file.info(name).shape;
    if (s.size() != 2)
      throw InvalidArgument("checkpoint " + file.path() + ": '" + n + "' has shape " + shape_str(s) +
                            ", want [hidden, experts]");
    c.experts = static_cast<int>(s[1]);
  }
  if (first_moe >= 0) c.moe_every = first_moe + 1;
  auto it = file.metadata().find("n_head");
  c.heads = 0;
  if (it != file.metadata().end()) {
    try {
      c.heads = std::stoi(it->second);
    } catch (const std::exception&) {
      throw InvalidArgument("checkpoint " + file.path() + ": metadata n_head '" + it->second + "' is not a number");
    }
  }
  return c;
}

void check_checkpoint(const SafetensorsFile& file, const GPTConfig& cfg) {
  auto names = model_names(file);
  // Every tensor of the model must be there with its shape, and nothing else (a typo in a name must not
  // leave a layer at its initial value).
  std::set<std::string> expected;
  for (const auto& [name, full] : full_model_tensors(cfg)) {
    expected.insert(name);
    auto it = names.find(name);
    if (it == names.end()) throw InvalidArgument("checkpoint " + file.path() + ": tensor '" + name + "' is missing");
    const auto& have = file.info(it->second).shape;
    if (have != full)
      throw InvalidArgument("checkpoint " + file.path() + ": tensor '" + it->second + "' has shape " + shape_str(have) +
                            ", the model needs " + shape_str(full));
  }
  for (const auto& [bare, name] : names)
    if (!expected.count(bare))
      throw InvalidArgument("checkpoint " + file.path() + ": unexpected tensor '" + name + "' (not part of a " +
                            std::to_string(cfg.layers) + "-layer GPT-2)");
}

void load_shard(const SafetensorsFile& file, const ShardLayout& layout, float* params) {
  check_checkpoint(file, layout.config());
  auto names = model_names(file);
  for (const auto& p : layout.params()) {
    std::vector<float> full = file.read_f32(names.at(p.name));
    float* local = params + p.offset;
    std::fill(local, local + p.numel, 0.0f);
    for (const auto& s : layout.segments(p)) std::copy_n(full.data() + s.full_offset, s.len, local + s.local_offset);
  }
}

void save_model(ParallelGroups& g, const std::vector<ShardLayout>& chunks, const float* params,
                const std::string& path) {
  constexpr int kTag = 4;
  Communicator& world = *g.world;
  const int V = static_cast<int>(chunks.size());
  size_t mine = 0;
  for (const auto& l : chunks) mine += l.total();
  // Replica 0 sends everything; with expert parallelism the other expert-parallel ranks of its expert group (the
  // next ep - 1 data-parallel ranks) send their experts too (the tensor-parallel ranks hold the same experts).
  const int ep = chunks.front().ep();
  const bool sends_experts = g.me.dp > 0 && g.me.dp < ep && g.me.tp == 0;
  if ((g.me.dp == 0 || sends_experts) && world.rank() != 0) world.send(params, mine, DataType::float32, 0, kTag);
  if (world.rank() != 0) return;
  const GPTConfig& cfg = chunks.front().config();
  std::map<std::string, std::vector<float>> full;
  for (const auto& [name, shape] : full_model_tensors(cfg)) {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    full[name].resize(n);
  }
  for (int pp = 0; pp < g.dims.pp; ++pp)
    for (int tp = 0; tp < g.dims.tp; ++tp)
      for (int e = 0; e < (tp == 0 ? ep : 1); ++e) {
        int src = rank_of({tp, pp, e}, g.dims);
        std::vector<ShardLayout> theirs;
        size_t total = 0;
        for (int v = 0; v < V; ++v) {
          theirs.emplace_back(cfg, g.dims.tp, tp, g.dims.pp * V, v * g.dims.pp + pp, ep, e);
          total += theirs.back().total();
        }
        std::vector<float> buf;
        const float* shard = params;
        if (src != 0) {
          buf.resize(total);
          world.recv(buf.data(), buf.size(), DataType::float32, src, kTag);
          shard = buf.data();
        }
        for (const auto& chunk : theirs) {
          for (const auto& p : chunk.params())
            if (e == 0 || p.expert)
              for (const auto& s : chunk.segments(p))
                std::copy_n(shard + p.offset + s.local_offset, s.len, full[p.name].data() + s.full_offset);
          shard += chunk.total();
        }
      }
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, shape] : full_model_tensors(cfg)) tensors.push_back({name, shape, full[name].data()});
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"n_head", std::to_string(cfg.heads)},
                                          {"n_layer", std::to_string(cfg.layers)},
                                          {"n_embd", std::to_string(cfg.hidden)},
                                          {"n_positions", std::to_string(cfg.positions)},
                                          {"vocab_size", std::to_string(cfg.vocab)}};
  if (cfg.experts > 0)
    meta["n_experts"] = std::to_string(cfg.experts), meta["moe_every"] = std::to_string(cfg.moe_every);
  write_safetensors(path, tensors, meta);
}

}  // namespace mpcomm::parallel
