// Tests of the safetensors reader/writer: round trips, dtype conversion from hand-made files, one case per
// malformed input (each checks the message names the path and the problem), and a file exchange with Python.
#include "parallel/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mpcomm/error.h"

namespace mpcomm::parallel {
namespace {

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/mpcomm_safetensors_test.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string u64_le(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

// A safetensors file made by hand: length prefix, header text as given, then `data`.
std::string raw_file(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

template <class T>
std::string as_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The message of the InvalidArgument that `f` throws (fails the test if it throws anything else or nothing).
template <class F>
std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than InvalidArgument: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

std::string open_error(const std::string& path) {
  return invalid_argument_of([&] { SafetensorsFile f(path); });
}

// ---------------------------------------------------------------------------------------------------------
// Round trips

TEST(Safetensors, RoundTripKeepsValuesShapesOrderAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::vector<float> w(2 * 3), b(3), empty;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 1.0f;
  b = {1e-30f, -7.5f, 3.0e30f};
  float scalar = 42.0f;
  write_safetensors(
      path, {{"h.0.w", {2, 3}, w.data()}, {"h.0.b", {3}, b.data()}, {"step", {}, &scalar}, {"none", {0, 3}, nullptr}},
      {{"format", "pt"}, {"note", "gpt2 \"small\" ü"}});

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "gpt2 \"small\" ü"}}));
  EXPECT_EQ(f.info("h.0.w").dtype, "F32");
  EXPECT_EQ(f.info("h.0.w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.info("step").shape, std::vector<int64_t>{});
  EXPECT_EQ(f.info("step").numel(), 1);
  EXPECT_EQ(f.info("none").numel(), 0);
  EXPECT_EQ(f.read_f32("h.0.w"), w);
  EXPECT_EQ(f.read_f32("h.0.b"), b);
  EXPECT_EQ(f.read_f32("step"), std::vector<float>{42.0f});
  EXPECT_TRUE(f.read_f32("none").empty());
  EXPECT_TRUE(f.has("h.0.b"));
  EXPECT_FALSE(f.has("h.1.b"));
  // Tensors are packed in the order given.
  EXPECT_EQ(f.info("h.0.w").begin, 0u);
  EXPECT_EQ(f.info("h.0.b").begin, 24u);
  EXPECT_EQ(f.info("step").begin, 36u);

  // The header is space-padded so that the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(std::filesystem::file_size(path), 8 + n + 40);
}

TEST(Safetensors, WriteWithoutMetadataOmitsItAndReplacesTheOldFileLeavingNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  std::vector<float> x = {1, 2, 3};
  write_safetensors(path, {{"x", {3}, x.data()}}, {{"k", "v"}});
  write_safetensors(path, {{"y", {1, 3}, x.data()}});
  SafetensorsFile f(path);
  EXPECT_FALSE(f.has("x"));
  EXPECT_EQ(f.read_f32("y"), x);
  EXPECT_TRUE(f.metadata().empty());
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.find("__metadata__"), std::string::npos);
}

TEST(Safetensors, MovedFileStillReads) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  std::vector<float> x = {5, 6};
  write_safetensors(path, {{"x", {2}, x.data()}});
  SafetensorsFile a(path);
  SafetensorsFile b(std::move(a));
  EXPECT_EQ(b.read_f32("x"), x);
}

// ---------------------------------------------------------------------------------------------------------
// Other dtypes, from files written byte by byte

TEST(Safetensors, ConvertsF16BF16AndF64ToFloat) {
  TempDir dir;
  const std::string path = dir.file("mixed.safetensors");
  std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001};  // 1, -2, 0.5, 65504, 2^-24
  std::vector<uint16_t> bf16 = {0x3F80, 0xC040, 0x3E20};                 // 1, -3, 0.15625
  std::vector<double> f64 = {1.5, -1e-3, 1e300};
  std::vector<int32_t> i32 = {1, 2};
  std::string header = R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},)"
                       R"("b":{"dtype":"BF16","shape":[3,1],"data_offsets":[10,16]},)"
                       R"("d":{"dtype":"F64","shape":[3],"data_offsets":[16,40]},)"
                       R"("i":{"dtype":"I32","shape":[2],"data_offsets":[40,48]}})";
  write_bytes(path, raw_file(header, as_bytes(f16) + as_bytes(bf16) + as_bytes(f64) + as_bytes(i32)));

  SafetensorsFile f(path);
  EXPECT_EQ(f.read_f32("h"), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24)}));
  EXPECT_EQ(f.read_f32("b"), (std::vector<float>{1.0f, -3.0f, 0.15625f}));
  std::vector<float> d = f.read_f32("d");
  EXPECT_EQ(d[0], 1.5f);
  EXPECT_EQ(d[1], static_cast<float>(-1e-3));
  EXPECT_TRUE(std::isinf(d[2]));
  EXPECT_EQ(f.info("b").shape, (std::vector<int64_t>{3, 1}));
  std::string msg = invalid_argument_of([&] { f.read_f32("i"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'i' has dtype I32"), std::string::npos) << msg;
}

TEST(Safetensors, AcceptsGapsEmptyTensorsAtOneOffsetAndUnpaddedHeaders) {
  TempDir dir;
  const std::string path = dir.file("gaps.safetensors");
  std::vector<float> data = {1, 2, 3, 4};
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                       R"("e1":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                       R"("e2":{"dtype":"F32","shape":[2,0],"data_offsets":[8,8]},)"
                       R"("z":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})";
  write_bytes(path, raw_file(header, as_bytes(data)));
  SafetensorsFile f(path);
  EXPECT_EQ(f.read_f32("a"), std::vector<float>{2});
  EXPECT_EQ(f.read_f32("z"), std::vector<float>{4});
  EXPECT_TRUE(f.read_f32("e2").empty());
}

TEST(Safetensors, UnknownNameIsReportedWithThePath) {
  TempDir dir;
  const std::string path = dir.file("n.safetensors");
  write_safetensors(path, {});
  SafetensorsFile f(path);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(invalid_argument_of([&] { f.info("wte"); }), path + ": no tensor 'wte'");
  EXPECT_EQ(invalid_argument_of([&] { f.read_f32("wte"); }), path + ": no tensor 'wte'");
}

// ---------------------------------------------------------------------------------------------------------
// Malformed files: the file itself

TEST(SafetensorsMalformed, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent.safetensors");
  std::string msg = open_error(path);
  EXPECT_NE(msg.find(path + ": cannot open: No such file"), std::string::npos) << msg;
}

TEST(SafetensorsMalformed, DirectoryIsNotAFile) {
  TempDir dir;
  std::string msg = open_error(dir.path());
  EXPECT_EQ(msg, dir.path() + ": not a regular file");
}

TEST(SafetensorsMalformed, ShorterThan8Bytes) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  write_bytes(path, std::string("\x05\0\0", 3));
  std::string msg = open_error(path);
  EXPECT_EQ(msg, path + ": file is 3 bytes, shorter than the 8-byte header length");
}

TEST(SafetensorsMalformed, HeaderLengthLargerThanFile) {
  TempDir dir;
  const std::string path = dir.file("trunc.safetensors");
  write_bytes(path, u64_le(64) + "{}");
  EXPECT_EQ(open_error(path), path + ": header length 64 is larger than the file (10 bytes)");
}

TEST(SafetensorsMalformed, HeaderLengthOver100MiB) {
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  write_bytes(path, u64_le((100ull << 20) + 1) + "{}");
  EXPECT_EQ(open_error(path), path + ": header length 104857601 exceeds the 100 MiB limit");
  write_bytes(path, u64_le(~0ull) + "{}");
  EXPECT_NE(open_error(path).find("exceeds the 100 MiB limit"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------
// Malformed files: the header, one case each

struct BadHeader {
  const char* label;
  std::string header;
  size_t data_bytes;
  std::string expected;  // must appear in the message, after "<path>: "
};

class SafetensorsBadHeader : public testing::TestWithParam<BadHeader> {};

TEST_P(SafetensorsBadHeader, IsRejectedNamingPathAndProblem) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, raw_file(GetParam().header, std::string(GetParam().data_bytes, '\0')));
  std::string msg = open_error(path);
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(GetParam().expected), std::string::npos) << msg;
}

std::string entry(const std::string& fields) { return R"({"a":{)" + fields + "}}"; }
const std::string kDtype = R"("dtype":"F32")", kShape = R"("shape":[2])", kOffsets = R"("data_offsets":[0,8])";

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsBadHeader,
    testing::Values(
        BadHeader{"InvalidJson", R"({"a":{"dtype":"F32",)", 0, "header is not valid JSON"},
        BadHeader{"InvalidUtf8", "{\"a\xff\":{}}", 0, "header is not valid JSON"},
        BadHeader{"NotAnObject", "[1,2]", 0, "header is not a JSON object"},
        BadHeader{"EntryNotAnObject", R"({"a":5})", 0, "tensor 'a': entry is not an object"},
        BadHeader{"MissingDtype", entry(kShape + "," + kOffsets), 8, "tensor 'a': missing \"dtype\""},
        BadHeader{"MissingShape", entry(kDtype + "," + kOffsets), 8, "tensor 'a': missing \"shape\""},
        BadHeader{"MissingOffsets", entry(kDtype + "," + kShape), 8, "tensor 'a': missing \"data_offsets\""},
        BadHeader{"DtypeNotString", entry(R"("dtype":4,)" + kShape + "," + kOffsets), 8,
                  "tensor 'a': \"dtype\" is not a string"},
        BadHeader{"UnknownDtype", entry(R"("dtype":"F31",)" + kShape + "," + kOffsets), 8,
                  "tensor 'a': unknown dtype 'F31'"},
        BadHeader{"ShapeNotArray", entry(kDtype + R"(,"shape":2,)" + kOffsets), 8,
                  "tensor 'a': \"shape\" is not an array"},
        BadHeader{"ShapeNotInteger", entry(kDtype + R"(,"shape":[2.0],)" + kOffsets), 8,
                  "tensor 'a': \"shape\" holds a non-integer 2.0"},
        BadHeader{"NegativeDimension", entry(kDtype + R"(,"shape":[-2,-1],)" + kOffsets), 8,
                  "tensor 'a': \"shape\" holds a negative dimension -2"},
        BadHeader{"OffsetsNotPair", entry(kDtype + "," + kShape + R"(,"data_offsets":[8])"), 8,
                  "tensor 'a': \"data_offsets\" is not two non-negative integers: [8]"},
        BadHeader{"OffsetsNegative", entry(kDtype + "," + kShape + R"(,"data_offsets":[-8,0])"), 8,
                  "tensor 'a': \"data_offsets\" is not two non-negative integers"},
        BadHeader{"OffsetsNotIntegers", entry(kDtype + "," + kShape + R"(,"data_offsets":["0","8"])"), 8,
                  "tensor 'a': \"data_offsets\" is not two non-negative integers"},
        BadHeader{"BeginAfterEnd", entry(kDtype + "," + kShape + R"(,"data_offsets":[8,0])"), 8,
                  "tensor 'a': data_offsets begin 8 > end 0"},
        BadHeader{"OffsetsOutsideData", entry(kDtype + "," + kShape + "," + kOffsets), 4,
                  "tensor 'a': data_offsets [0, 8] outside the data section of 4 bytes"},
        BadHeader{"SizeNotMatchingShape", entry(kDtype + R"(,"shape":[3],)" + kOffsets), 8,
                  "tensor 'a': holds 8 bytes but shape [3] of F32 needs 12"},
        BadHeader{"SizeOverflows", entry(kDtype + R"(,"shape":[4294967296,4294967296,2],)" + kOffsets), 8,
                  "tensor 'a': holds 8 bytes but shape [4294967296,4294967296,2] of F32 needs more than 2^64"},
        BadHeader{"Overlap",
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F16","shape":[4],"data_offsets":[4,12]}})",
                  12, "tensors 'a' and 'b' overlap"},
        BadHeader{"DuplicateName",
                  R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                  R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  8, "header names 'a' twice"},
        BadHeader{"MetadataNotObject", R"({"__metadata__":["x"]})", 0, "\"__metadata__\" is not an object"},
        BadHeader{"MetadataValueNotString", R"({"__metadata__":{"step":3}})", 0,
                  "\"__metadata__\" value of 'step' is not a string"}),
    [](const testing::TestParamInfo<BadHeader>& p) { return std::string(p.param.label); });

// ---------------------------------------------------------------------------------------------------------
// Bad arguments to the writer

TEST(SafetensorsWrite, RejectsBadTensorsNamingPathAndLeavesNothingBehind) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  float x[2] = {1, 2};
  auto error = [&](const std::vector<TensorToWrite>& t) {
    return invalid_argument_of([&] { write_safetensors(path, t); });
  };
  EXPECT_EQ(error({{"x", {2}, x}, {"x", {2}, x}}), path + ": tensor 'x' given twice");
  EXPECT_EQ(error({{"x", {2, -1}, x}}), path + ": tensor 'x' has a negative dimension -1");
  EXPECT_EQ(error({{"x", {2}, nullptr}}), path + ": tensor 'x' has no data");
  EXPECT_EQ(error({{"", {2}, x}}), path + ": invalid tensor name ''");
  EXPECT_EQ(error({{"__metadata__", {2}, x}}), path + ": invalid tensor name '__metadata__'");
  EXPECT_NE(error({{"bad\xff", {2}, x}}).find(path + ": a tensor name or metadata string is not valid UTF-8"),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));

  const std::string nowhere = dir.file("no/such/dir/w.safetensors");
  std::string msg = invalid_argument_of([&] { write_safetensors(nowhere, {{"x", {2}, x}}); });
  EXPECT_EQ(msg.rfind(nowhere + ": cannot create temporary file", 0), 0u) << msg;
}

// ---------------------------------------------------------------------------------------------------------
// Interoperability: Python (json + numpy, written independently of this code) reads our file and writes one.

TEST(Safetensors, ExchangesFilesWithPython) {
  std::string python;  // the first interpreter that has numpy (a pyenv shim on PATH may lack it)
  for (const char* p : {"python3", "/usr/bin/python3"})
    if (python.empty() && std::system((std::string(p) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) python = p;
  if (python.empty()) GTEST_SKIP() << "no python3 with numpy";
  TempDir dir;
  const std::string ours = dir.file("ours.safetensors"), theirs = dir.file("theirs.safetensors");
  std::vector<float> w = {0.5f, -1.25f, 3.0f, 4.0f, 5.0f, -6.0f};
  write_safetensors(ours, {{"w", {3, 2}, w.data()}}, {{"format", "pt"}});
  const std::string script = dir.file("x.py");
  std::ofstream(script) << R"(import json, struct, sys
import numpy as np
ours, theirs = sys.argv[1], sys.argv[2]
raw = open(ours, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert n % 8 == 0 and h["__metadata__"] == {"format": "pt"}, h
e = h["w"]
w = np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
assert e["dtype"] == "F32" and w.tolist() == [[0.5, -1.25], [3, 4], [5, -6]], w
tensors = {"emb": np.arange(12, dtype="<f4").reshape(3, 4) / 8, "ln": np.array([1.5, -0.25], dtype="<f2"),
           "dbl": np.array([[2.5]], dtype="<f8")}
header, blobs, off = {"__metadata__": {"source": "numpy"}}, [], 0
for name, a in tensors.items():
    b = a.tobytes()
    header[name] = {"dtype": {"f": "F", "i": "I"}[a.dtype.kind] + str(8 * a.itemsize), "shape": list(a.shape),
                    "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(theirs, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
)";
  ASSERT_EQ(std::system((python + " " + script + " " + ours + " " + theirs).c_str()), 0);
  SafetensorsFile f(theirs);
  EXPECT_EQ(f.metadata().at("source"), "numpy");
  EXPECT_EQ(f.info("emb").shape, (std::vector<int64_t>{3, 4}));
  std::vector<float> emb = f.read_f32("emb");
  for (size_t i = 0; i < emb.size(); ++i) EXPECT_EQ(emb[i], static_cast<float>(i) / 8);
  EXPECT_EQ(f.info("ln").dtype, "F16");
  EXPECT_EQ(f.read_f32("ln"), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(f.read_f32("dbl"), std::vector<float>{2.5f});
}

}  // namespace
}  // namespace mpcomm::parallel
