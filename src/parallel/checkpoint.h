// GPT-2 checkpoints as safetensors files with Hugging Face names: read onto the ranks shard by shard,
// written whole from a sharded run.
//
// Reading accepts a "transformer." prefix on every name and ignores the attention-mask buffers
// (h.N.attn.bias, h.N.attn.masked_bias) and lm_head.weight (tied to wte); any other unexpected name,
// a missing tensor or a wrong shape is an error naming the file and the tensor. Float16, bfloat16 and
// float64 tensors are converted to float32.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "parallel/groups.h"
#include "parallel/layout.h"
#include "parallel/safetensors.h"

namespace mpcomm::parallel {

// The model a checkpoint holds: layers, hidden, vocabulary and positions from its tensors; heads from
// its "n_head" metadata (0 when absent: the caller must say).
GPTConfig checkpoint_config(const SafetensorsFile& file);

// Throws InvalidArgument unless `file` holds exactly the tensors of `cfg`'s model, with their shapes.
void check_checkpoint(const SafetensorsFile& file, const GPTConfig& cfg);

// Fills this rank's flat parameter buffer from `file`. Throws InvalidArgument on any mismatch.
void load_shard(const SafetensorsFile& file, const ShardLayout& layout, float* params);

// Writes the whole model to `path`. Collective over g.world: the ranks of data-parallel replica 0 send
// their shards to world rank 0, which assembles and writes the file (float32, Hugging Face names,
// metadata n_head/n_layer/n_embd/n_positions/vocab_size).
// `chunks`: this rank's model chunks back to back in `params` (one; or V under the interleaved schedule, chunk
// v being virtual stage v·pp + the rank's stage).
void save_model(ParallelGroups& g, const std::vector<ShardLayout>& chunks, const float* params, const std::string& path);

}  // namespace mpcomm::parallel
