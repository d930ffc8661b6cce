// The text format of selection tables, version 1: reading and writing.
//
//   table   := section {section}; blank lines and comments (# to the end of a line) anywhere
//   section := header, then rows (of that backend)
//   header  := mpcomm-tuning 1 backend=NAME [machine=FINGERPRINT]
//              (machine: the host fingerprint the section was measured on; a table of backend auto
//              is used only on a matching machine unless it is the built-in one)
//   row     := SUBJECT {FIELD=VALUE} -> CHOICE {NOTE=VALUE}
//
// SUBJECT and CHOICE come from the backend's vocabulary (selection_table.h): an op and one of its
// algorithms, or a protocol choice point (send.path, ...) and one of its choices.
// FIELD (each at most once per row; a field left out holds always):
//   dtype          int, float or half, or several comma-separated (DtypeClass)
//   bytes          per rank: count × element size (for allgather ... alltoall, one block; allgatherv:
//                  the total's share per rank, rounded up; alltoallv: 0, its ranks share no size); for
//                  a per-message subject (send.path, collective.path) the message's size
//   total          all blocks of the block ops (allgather, reduce_scatter, gather, scatter, alltoall,
//                  allgatherv)
//   flat_bytes     bytes × max(ranks - 1, 1): what a rank sends in a flat exchange
//   ranks, hosts   the communicator's ranks and hosts
//   per_host       the most ranks on one host
//   cpus_per_rank  the fewest CPUs per rank of any host (below 1: ranks outnumber the CPUs)
//   even_hosts     yes/no: every host holds as many ranks
//   single_copy    yes/no: one host, and every rank may read and write every other's memory
//   placement      near/far: the first two ranks' CPUs, measured when the communicator was created
//   placement_now  near/far: the same, measured at this call (one round of small frames)
//   in_place       yes/no: some rank runs the call in place (agreed in one round of small frames)
// dtype, total and flat_bytes do not apply to per-message subjects; placement_now and in_place only to
// algorithm rows (Subject::call_facts).
// The number fields take one value (4, 64K) or an interval with open or closed ends ([64K,8M),
// (0,1], [2,inf)); sizes take K, M, G and T (powers of 1024).
// NOTE (what a measured table says, not matched): at=SIZE (the size measured), us=ALG:MICROSECONDS,...
// (every candidate's median time there), skipped=ALG,... (candidates that cannot run in this shape).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "mpcomm/error.h"
#include "tuning/selection_table.h"

namespace mpcomm::tuning {

namespace {

constexpr int kVersion = 1;
constexpr std::string_view kMagic = "mpcomm-tuning";

enum class Kind { size, count, real, yesno, placement, dtype };

struct Field {
  const char* name;
  Kind kind;
  Range Row::*range = nullptr;
  Want Row::*want = nullptr;
  Placement Row::*place = nullptr;
};

// In the order format_row() writes them.
const Field kFields[] = {
    {"dtype", Kind::dtype},
    {"ranks", Kind::count, &Row::ranks},
    {"hosts", Kind::count, &Row::hosts},
    {"per_host", Kind::count, &Row::per_host},
    {"even_hosts", Kind::yesno, nullptr, &Row::even_hosts},
    {"cpus_per_rank", Kind::real, &Row::cpus_per_rank},
    {"single_copy", Kind::yesno, nullptr, &Row::single_copy},
    {"placement", Kind::placement, nullptr, nullptr, &Row::placement},
    {"bytes", Kind::size, &Row::bytes},
    {"total", Kind::size, &Row::total},
    {"flat_bytes", Kind::size, &Row::flat_bytes},
    {"in_place", Kind::yesno, nullptr, &Row::in_place},
    {"placement_now", Kind::placement, nullptr, nullptr, &Row::placement_now},
};
constexpr std::string_view kNotes[] = {"at", "us", "skipped"};

const char* expected(Kind k) {
  switch (k) {
    case Kind::size: return "an interval of sizes such as [64K,8M) or (0,32K], or one size such as 4K";
    case Kind::count: return "an interval of whole numbers such as [2,inf), or one number such as 4";
    case Kind::real: return "an interval of numbers such as (0,1) or [1,inf), or one number";
    case Kind::yesno: return "yes or no";
    case Kind::placement: return "near or far";
    case Kind::dtype: return "int, float or half, or several of them comma-separated";
  }
  return "?";
}

// Where in the text we are, for errors.
struct Where {
  const std::string& source;
  int line;
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument("mpcomm: " + source + ", line " + std::to_string(line) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& field, const std::string& want, std::string_view got) const {
    fail("field '" + field + "': expected " + want + ", got '" + std::string(got) + "'");
  }
};

bool parse_number(std::string_view s, Kind k, double* out) {
  if (s == "inf") {
    *out = std::numeric_limits<double>::infinity();
    return true;
  }
  const std::string text(s);
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return false;
  std::string_view suffix(end);
  if (k == Kind::size && !suffix.empty()) {
    const std::string_view units = "KMGT";
    const size_t u = suffix.size() == 1 ? units.find(suffix[0]) : std::string_view::npos;
    if (u == std::string_view::npos) return false;
    v *= std::pow(1024.0, static_cast<double>(u + 1));
    suffix = {};
  }
  if (!suffix.empty() || std::isnan(v)) return false;
  if (k != Kind::real && (v < 0 || v != std::floor(v))) return false;
  *out = v;
  return true;
}

bool parse_range(std::string_view s, Kind k, Range* r) {
  if (s.empty()) return false;
  if (s.front() != '[' && s.front() != '(') {
    double v = 0;
    if (!parse_number(s, k, &v) || std::isinf(v)) return false;
    r->lo = r->hi = v;
    r->lo_open = r->hi_open = false;
    return true;
  }
  if (s.size() < 5 || (s.back() != ']' && s.back() != ')')) return false;
  const size_t comma = s.find(',');
  if (comma == std::string_view::npos) return false;
  Range got;
  got.lo_open = s.front() == '(';
  got.hi_open = s.back() == ')';
  if (!parse_number(s.substr(1, comma - 1), k, &got.lo) || !parse_number(s.substr(comma + 1, s.size() - comma - 2), k, &got.hi))
    return false;
  if (std::isinf(got.lo) || got.lo > got.hi) return false;
  if (std::isinf(got.hi) && !got.hi_open) got.hi_open = true;  // [2,inf] means [2,inf)
  *r = got;
  return true;
}

void parse_field(const Where& at, Row* row, std::string_view name, std::string_view value, int* seen) {
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const Field& f = kFields[i];
    if (name != f.name) continue;
    if ((*seen >> i & 1) != 0) at.fail("field '" + std::string(name) + "' is given twice");
    *seen |= 1 << i;
    bool ok = false;
    switch (f.kind) {
      case Kind::size:
      case Kind::count:
      case Kind::real: ok = parse_range(value, f.kind, &(row->*f.range)); break;
      case Kind::yesno:
        ok = value == "yes" || value == "no";
        row->*f.want = value == "yes" ? Want::yes : Want::no;
        break;
      case Kind::placement:
        ok = value == "near" || value == "far";
        row->*f.place = value == "near" ? Placement::near : Placement::far;
        break;
      case Kind::dtype: {
        ok = !value.empty();
        for (size_t pos = 0; ok && pos <= value.size();) {
          size_t comma = std::min(value.find(',', pos), value.size());
          std::string_view one = value.substr(pos, comma - pos);
          bool known = false;
          for (int c = 0; c < kNumDtypeClasses; ++c)
            if (one == to_string(static_cast<DtypeClass>(c))) {
              row->dtypes |= 1 << c;
              known = true;
            }
          ok = known;
          pos = comma + 1;
        }
        break;
      }
    }
    if (!ok) at.fail(f.name, expected(f.kind), value);
    return;
  }
  std::string names;
  for (const Field& f : kFields) names += (names.empty() ? "" : ", ") + std::string(f.name);
  at.fail("field '" + std::string(name) + "': no such field (expected one of " + names + ")");
}

std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// The backend a header line names, and the machine it was measured on ("" when it does not say), the
// line checked.
std::pair<std::string_view, std::string_view> parse_header(const Where& at, const std::vector<std::string_view>& w) {
  // Any backend's header: a table may hold several sections, this reader's or not.
  const std::string want = std::string(kMagic) + " " + std::to_string(kVersion) + " backend=NAME";
  if (w.empty() || w[0] != kMagic) at.fail("expected a header '" + want + "' before any row");
  if (w.size() < 2 || w[1] != std::to_string(kVersion))
    at.fail("version", "format version " + std::to_string(kVersion) + " (this mpcomm reads no other)",
            w.size() < 2 ? std::string_view("nothing") : w[1]);
  if (w.size() < 3 || w[2].substr(0, 8) != "backend=" || w[2].size() == 8)
    at.fail("backend", "backend=NAME", w.size() < 3 ? std::string_view("nothing") : w[2]);
  std::string_view machine;
  if (w.size() > 3) {
    if (w[3].substr(0, 8) != "machine=" || w[3].size() == 8) at.fail("machine", "machine=FINGERPRINT", w[3]);
    machine = w[3].substr(8);
  }
  if (w.size() > 4) at.fail("expected nothing after '" + std::string(w[3]) + "', got '" + std::string(w[4]) + "'");
  return {w[2].substr(8), machine};
}

std::string list_of(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& k : names) list += (list.empty() ? "" : ", ") + k;
  return list;
}

// Bits of kFields that a subject's rows may not use.
int fields_refused(const Subject& s) {
  int refused = 0;
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const std::string_view f = kFields[i].name;
    if ((s.per_message && (f == "dtype" || f == "total" || f == "flat_bytes")) ||
        (!s.call_facts && (f == "in_place" || f == "placement_now")))
      refused |= 1 << i;
  }
  return refused;
}

Row parse_row(const Where& at, const std::vector<std::string_view>& w, const std::string& backend, const Vocabulary& vocab) {
  Row row;
  row.line = at.line;
  for (size_t k = 0; k < vocab.size(); ++k)
    if (!vocab[k].name.empty() && w[0] == vocab[k].name) row.subject = static_cast<int>(k);
  if (row.subject < 0) {
    std::vector<std::string> names;
    for (const Subject& s : vocab)
      if (!s.name.empty()) names.push_back(s.name);
    at.fail("subject", "what backend " + backend + "'s rows choose for (" + list_of(names) + ")", w[0]);
  }
  const Subject& subject = vocab[static_cast<size_t>(row.subject)];
  row.subject_name = subject.name;
  row.op = subject.op;
  size_t i = 1;
  int seen = 0;
  for (; i < w.size() && w[i] != "->"; ++i) {
    const size_t eq = w[i].find('=');
    if (eq == std::string_view::npos || eq == 0) at.fail("expected FIELD=VALUE or '-> CHOICE', got '" + std::string(w[i]) + "'");
    parse_field(at, &row, w[i].substr(0, eq), w[i].substr(eq + 1), &seen);
  }
  if (const int refused = seen & fields_refused(subject); refused != 0)
    for (size_t f = 0; f < std::size(kFields); ++f)
      if ((refused >> f & 1) != 0)
        at.fail("field '" + std::string(kFields[f].name) + "' does not apply to " + subject.name + " rows (" +
                (subject.per_message ? "they decide per message, by its size" : "they are decided without a round of frames at the call") + ")");
  if (i + 1 >= w.size()) at.fail("expected '-> CHOICE' after the conditions");
  row.choice = std::string(w[i + 1]);
  if (std::find(subject.choices.begin(), subject.choices.end(), row.choice) == subject.choices.end())
    at.fail("choice", "one of backend " + backend + "'s choices for " + subject.name + " (" + list_of(subject.choices) + ")",
            row.choice);
  for (i += 2; i < w.size(); ++i) {
    const size_t eq = w[i].find('=');
    const std::string_view key = w[i].substr(0, eq == std::string_view::npos ? 0 : eq);
    if (std::find(std::begin(kNotes), std::end(kNotes), key) == std::end(kNotes))
      at.fail("after the choice, expected at=SIZE, us=CHOICE:MICROSECONDS,... or skipped=CHOICE,..., got '" + std::string(w[i]) + "'");
    row.notes += (row.notes.empty() ? "" : " ") + std::string(w[i]);
  }
  return row;
}

std::string format_range(const Range& r, Kind k) {
  auto num = [&](double v) {
    if (std::isinf(v)) return std::string("inf");
    if (k == Kind::size) return format_size(v);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return std::string(buf);
  };
  if (r.lo == r.hi && !r.lo_open && !r.hi_open) return num(r.lo);
  return std::string(r.lo_open ? "(" : "[") + num(r.lo) + "," + num(r.hi) + (r.hi_open ? ")" : "]");
}

}  // namespace

bool Table::has_section() const { return std::find(sections.begin(), sections.end(), backend) != sections.end(); }

std::string format_size(double bytes) {
  const char* units = "KMGT";
  for (int u = 3; u >= 0; --u) {
    const double unit = std::pow(1024.0, u + 1);
    if (bytes >= unit && std::fmod(bytes, unit) == 0) return std::to_string(static_cast<uint64_t>(bytes / unit)) + units[u];
  }
  return std::to_string(static_cast<uint64_t>(bytes));
}

std::string format_header(const std::string& backend, const std::string& machine) {
  return std::string(kMagic) + " " + std::to_string(kVersion) + " backend=" + backend +
         (machine.empty() ? "" : " machine=" + machine);
}

std::string format_row(const Row& r) {
  std::string out = r.subject_name;
  for (const Field& f : kFields) {
    std::string v;
    switch (f.kind) {
      case Kind::size:
      case Kind::count:
      case Kind::real:
        if (!(r.*f.range).all()) v = format_range(r.*f.range, f.kind);
        break;
      case Kind::yesno:
        if (r.*f.want != Want::any) v = r.*f.want == Want::yes ? "yes" : "no";
        break;
      case Kind::placement:
        if (r.*f.place != Placement::unknown) v = std::string(to_string(r.*f.place));
        break;
      case Kind::dtype:
        for (int c = 0; c < kNumDtypeClasses; ++c)
          if ((r.dtypes >> c & 1) != 0) v += (v.empty() ? "" : ",") + std::string(to_string(static_cast<DtypeClass>(c)));
        break;
    }
    if (!v.empty()) out += " " + std::string(f.name) + "=" + v;
  }
  out += " -> " + r.choice;
  if (!r.notes.empty()) out += " " + r.notes;
  return out;
}

Table parse_table(std::string_view text, const std::string& source, const std::string& backend, const Vocabulary& vocab) {
  Table t;
  t.backend = backend;
  t.source = source;
  bool header = false, ours = false;
  int line = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    std::string_view l = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line;
    if (const size_t hash = l.find('#'); hash != std::string_view::npos) l = l.substr(0, hash);
    const std::vector<std::string_view> w = words_of(l);
    if (w.empty()) continue;
    const Where at{source, line};
    if (!header || w[0] == kMagic) {
      const auto [name, machine] = parse_header(at, w);
      ours = name == backend;
      if (ours) t.machine = std::string(machine);
      if (std::find(t.sections.begin(), t.sections.end(), name) == t.sections.end()) t.sections.emplace_back(name);
      header = true;
      continue;
    }
    if (ours) t.rows.push_back(parse_row(at, w, backend, vocab));
  }
  if (!header)
    Where{source, line + 1}.fail("expected a header '" + std::string(kMagic) + " " + std::to_string(kVersion) +
                                 " backend=NAME', got the end of the file");
  return t;
}

Table load_table(const std::string& path, const std::string& backend, const Vocabulary& vocab) {
  std::ifstream f(path);
  if (!f) throw InvalidArgument("mpcomm: tuning file " + path + ": cannot be read");
  std::stringstream text;
  text << f.rdbuf();
  return parse_table(text.str(), "tuning file " + path, backend, vocab);
}

}  // namespace mpcomm::tuning
