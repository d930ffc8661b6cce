// safetensors.cc — the safetensors reader and writer (format and guarantees in safetensors.h).
//
// Reader: the header length is checked against the file size and a 100 MiB cap before the header is read,
// and each entry's byte range against the data section, so read_f32 never allocates more than the file
// holds. Duplicate tensor names are caught while parsing (nlohmann would keep only the last). Tensor bytes
// are read with pread on the fd kept open since construction, so const reads may run concurrently.
// Writer: streams the header and each tensor's bytes to "<path>.tmp.<pid>.<n>", fsyncs, then renames, so
// readers see the old file or the complete new one, never a partial one.
#include "parallel/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "kernels/half.h"
#include "mpcomm/error.h"
#include "mpcomm/types.h"

namespace mpcomm::parallel {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Bytes per element of every dtype the format defines; 0 for an unknown one.
size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"U16", 2}, {"I16", 2}, {"F16", 2},
      {"BF16", 2}, {"U32", 4}, {"I32", 4}, {"F32", 4},     {"U64", 8},     {"I64", 8}, {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

[[noreturn]] void invalid(const std::string& prefix, const std::string& what) { throw InvalidArgument(prefix + what); }

std::string sys_error(const std::string& path, const char* what) {
  return path + ": " + what + ": " + std::strerror(errno);
}

// Reads exactly n bytes at offset; throws naming the path on an I/O error or a file that got shorter.
void pread_exact(int fd, const std::string& path, void* buf, uint64_t n, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Internal(sys_error(path, "read failed"));
    if (r == 0) throw InvalidArgument(path + ": unexpected end of file at byte " + std::to_string(offset));
    p += r, n -= static_cast<uint64_t>(r), offset += static_cast<uint64_t>(r);
  }
}

void write_all(int fd, const std::string& path, const void* buf, uint64_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1ull << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Internal(sys_error(path, "write failed"));
    p += w, n -= static_cast<uint64_t>(w);
  }
}

// Parses one tensor entry of the header; errors start with `where` ("<path>: tensor '<name>': ").
TensorInfo parse_entry(const nlohmann::json& e, uint64_t data_bytes, const std::string& where) {
  auto fail = [&](const std::string& what) { invalid(where, what); };
  if (!e.is_object()) fail("entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) fail(std::string("missing \"") + key + "\"");
  TensorInfo t;
  if (!e["dtype"].is_string()) fail("\"dtype\" is not a string");
  t.dtype = e["dtype"].get<std::string>();
  size_t elem = dtype_bytes(t.dtype);
  if (elem == 0) fail("unknown dtype '" + t.dtype + "'");
  if (!e["shape"].is_array()) fail("\"shape\" is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_integer()) fail("\"shape\" holds a non-integer " + d.dump());
    if (d.is_number_unsigned() ? d.get<uint64_t>() > uint64_t(INT64_MAX) : d.get<int64_t>() < 0)
      fail("\"shape\" holds a " + std::string(d.is_number_unsigned() ? "too large" : "negative") + " dimension " +
           d.dump());
    t.shape.push_back(d.get<int64_t>());
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(t.shape.back()), &numel);
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail("\"data_offsets\" is not two non-negative integers: " + off.dump());
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  if (t.begin > t.end) fail("data_offsets begin " + std::to_string(t.begin) + " > end " + std::to_string(t.end));
  if (t.end > data_bytes)
    fail("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] outside the data section of " +
         std::to_string(data_bytes) + " bytes");
  uint64_t want = 0;
  overflow |= __builtin_mul_overflow(numel, elem, &want);
  if (overflow || want != t.end - t.begin || numel > uint64_t(INT64_MAX))
    fail("holds " + std::to_string(t.end - t.begin) + " bytes but shape " + e["shape"].dump() + " of " + t.dtype +
         " needs " + (overflow ? std::string("more than 2^64") : std::to_string(want)));
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) { invalid(path_ + ": ", what); };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw Internal(sys_error(path_, "fstat failed"));
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
    const auto file_bytes = static_cast<uint64_t>(st.st_size);
    if (file_bytes < 8) fail("file is " + std::to_string(file_bytes) + " bytes, shorter than the 8-byte header length");
    uint64_t n = 0;
    pread_exact(fd_, path_, &n, 8, 0);
    if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " exceeds the 100 MiB limit");
    if (n > file_bytes - 8)
      fail("header length " + std::to_string(n) + " is larger than the file (" + std::to_string(file_bytes) +
           " bytes)");
    std::string text(n, '\0');
    pread_exact(fd_, path_, text.data(), n, 8);
    data_start_ = 8 + n;
    const uint64_t data_bytes = file_bytes - data_start_;

    std::set<std::string> names;
    std::string duplicate;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& k) {
        if (depth == 1 && ev == nlohmann::json::parse_event_t::key && !names.insert(k.get<std::string>()).second)
          duplicate = k.get<std::string>();
        return true;
      });
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail("header is not a JSON object");
    if (!duplicate.empty()) fail("header names '" + duplicate + "' twice");

    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) fail("\"__metadata__\" is not an object");
        for (const auto& [k, v] : entry.items()) {
          if (!v.is_string()) fail("\"__metadata__\" value of '" + k + "' is not a string");
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      tensors_[name] = parse_entry(entry, data_bytes, path_ + ": tensor '" + name + "': ");
    }

    // Overlap: sorted by begin, each non-empty range must start at or after the previous one's end.
    std::vector<std::pair<const TensorInfo*, const std::string*>> ranges;
    for (const auto& [name, t] : tensors_)
      if (t.end > t.begin) ranges.emplace_back(&t, &name);
    std::sort(ranges.begin(), ranges.end(), [](auto a, auto b) { return a.first->begin < b.first->begin; });
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first->begin < ranges[i - 1].first->end)
        fail("tensors '" + *ranges[i - 1].second + "' and '" + *ranges[i].second + "' overlap");
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_start_(o.data_start_),
      tensors_(std::move(o.tensors_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    data_start_ = o.data_start_;
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw InvalidArgument(path_ + ": no tensor '" + name + "'");
  return it->second;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const TensorInfo& t = info(name);
  const auto n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const uint64_t at = data_start_ + t.begin;
  if (t.dtype == "F32") {
    pread_exact(fd_, path_, out.data(), t.nbytes(), at);
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    std::vector<uint16_t> raw(n);
    pread_exact(fd_, path_, raw.data(), t.nbytes(), at);
    if (t.dtype == "F16")
      for (size_t i = 0; i < n; ++i) out[i] = half_to_float(raw[i]);
    else
      for (size_t i = 0; i < n; ++i) out[i] = detail::bf16_to_f32(raw[i]);
  } else if (t.dtype == "F64") {
    std::vector<double> raw(n);
    pread_exact(fd_, path_, raw.data(), t.nbytes(), at);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(raw[i]);
  } else {
    throw InvalidArgument(path_ + ": tensor '" + name + "' has dtype " + t.dtype +
                          "; read_f32 converts only F32, F16, BF16 and F64");
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  auto fail = [&](const std::string& what) { invalid(path + ": ", what); };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint64_t> bytes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") fail("invalid tensor name '" + t.name + "'");
    if (header.contains(t.name)) fail("tensor '" + t.name + "' given twice");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("tensor '" + t.name + "' has a negative dimension " + std::to_string(d));
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > (1ull << 61))
        fail("tensor '" + t.name + "' is too large");
    }
    if (numel > 0 && t.data == nullptr) fail("tensor '" + t.name + "' has no data");
    bytes.push_back(numel * 4);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes.back()}}};
    offset += bytes.back();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("a tensor name or metadata string is not valid UTF-8: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create temporary file " + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, path, &n, 8);
    write_all(fd, path, text.data(), n);
    for (size_t i = 0; i < tensors.size(); ++i) write_all(fd, path, tensors[i].data, bytes[i]);
    if (::fsync(fd) != 0) throw Internal(sys_error(path, "fsync failed"));
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Internal(sys_error(path, "close failed"));
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw Internal(sys_error(path, "rename failed"));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace mpcomm::parallel
