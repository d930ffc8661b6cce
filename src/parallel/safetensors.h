// safetensors.h — reads and writes checkpoints in the safetensors format (Hugging Face):
//   u64 little-endian N | N bytes of JSON header | data section
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
// the data section) plus an optional "__metadata__" object of string -> string. Tensors are little-endian,
// row-major.
//
// Guarantees: the reader validates the whole header when the file is opened (header length bounded by the
// file and by 100 MiB before anything is allocated; every entry's fields, types, dtype, byte size and range
// checked; no two tensors overlap), so later reads allocate at most what the file holds. Gaps between
// tensors are accepted. Every error is an mpcomm::InvalidArgument (a bad file or name) or mpcomm::Internal
// (a failed system call) whose message starts with the path. Reads use pread and are safe from several
// threads. The writer produces F32 only and replaces the target atomically (temporary file, fsync, rename).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mpcomm::parallel {

// One tensor entry of a safetensors header.
struct TensorInfo {
  std::string dtype;            // "F32", "F16", "BF16", "F64", ... as in the file
  std::vector<int64_t> shape;   // empty for a scalar
  uint64_t begin = 0, end = 0;  // byte range inside the data section
  int64_t numel() const;        // product of shape (1 for a scalar)
  uint64_t nbytes() const { return end - begin; }
};

// An open, validated safetensors file. Movable, not copyable; the file stays open until destruction.
class SafetensorsFile {
 public:
  // Reads and validates the header; throws InvalidArgument naming the path and the problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws InvalidArgument "<path>: no tensor '<name>'".
  const TensorInfo& info(const std::string& name) const;
  // The tensor as float32 (F32 as is; F16, BF16 and F64 converted). Throws InvalidArgument for other dtypes.
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // file offset of the data section: 8 + header length
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: float32 data, row-major, numel(shape) elements (data may be null when that is 0).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes an F32 safetensors file: tensors packed in the order given, header padded with spaces to a
// multiple of 8 bytes, "__metadata__" included when non-empty. Replaces `path` atomically. Throws
// InvalidArgument for bad arguments (empty, duplicate or reserved name, negative dimension, null data) or an
// uncreatable file, Internal when a write, fsync or rename fails; the message starts with the path.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mpcomm::parallel
