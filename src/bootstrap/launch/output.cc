// mpcomm launch, output: the ranks' stdout and stderr reach the launcher's as whole lines, each behind
// its rank's "[r] " prefix. Forked ranks each have their own pipes (Stream); under mpirun every rank's
// output comes through mpirun's two pipes, tagged (--tag-output), and TagDemux sorts it back into the
// same "[r] " lines, passing mpirun's own text through and noting the rank failures it reports.
//
// Guarantees: a rank's lines leave whole and in order, never cut by another rank's (the lines a read
// completed go out in one Output::write, which finishes before anything else is written); a line longer
// than kMaxLine leaves in kMaxLine pieces, each a line of its own; text without a final newline leaves
// at EOF with one added. A closed destination (EPIPE) drops what is written to it; the job goes on.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/launch/launch_internal.h"

namespace mpcomm::launch_detail {

namespace {

constexpr size_t kMaxLine = 64 * 1024;  // longer lines are cut into pieces this long

}  // namespace

// ---- the streams of forked ranks ---------------------------------------------------------------------

void Output::write(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0 && !broken_[fd]) {
    ssize_t w = ::write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
    } else {
      broken_[fd] = true;
    }
  }
}

void Stream::relay(const std::string& prefix, bool eof, Output& out) {
  std::string text;
  size_t start = 0;
  for (;;) {
    size_t nl = pending.find('\n', start);
    size_t len = (nl == std::string::npos ? pending.size() : nl) - start;
    if (len > kMaxLine) {
      (text += prefix).append(pending, start, kMaxLine) += '\n';
      start += kMaxLine;
    } else if (nl != std::string::npos) {
      (text += prefix).append(pending, start, len + 1);
      start = nl + 1;
    } else {
      break;
    }
  }
  pending.erase(0, start);
  if (eof && !pending.empty()) {
    text += prefix + pending + "\n";
    pending.clear();
  }
  if (!text.empty()) out.write(dest, text);
}

void Stream::take(const char* p, size_t n, const std::string& prefix, Output& out) {
  if (demux != nullptr) {
    demux->feed(p, n, out);
    return;
  }
  pending.append(p, n);
  relay(prefix, /*eof=*/false, out);
}

void Stream::close(const std::string& prefix, Output& out) {
  if (fd < 0) return;
  if (demux != nullptr)
    demux->finish(out);
  else
    relay(prefix, /*eof=*/true, out);
  ::close(fd);
  fd = -1;
}

// ---- mpirun's output -----------------------------------------------------------------------------

// Turns one of mpirun's --tag-output streams back into whole lines per rank. mpirun tags each chunk of a
// rank's output that it forwards, and each line within a chunk, with "[JOB,RANK]<stdout>:" (<stderr>,
// <stddiag>); chunks of different ranks interleave mid-line ("[1,0]<stdout>:part1 [1,2]<stdout>:x\n
// [1,0]<stdout>:part2\n"). So the stream is a sequence of segments, each a tag and its text up to the next
// newline or the next tag; each rank's text is collected apart and leaves as whole "[r] " lines, exactly
// as a forked rank's would. Untagged text is mpirun's own (warnings, failure reports): it passes through
// unchanged and is scanned for the rank failures mpirun reports.

void TagDemux::feed(const char* p, size_t n, Output& out) {
  buf_.append(p, n);
  parse(/*eof=*/false, out);
}

void TagDemux::finish(Output& out) {
  parse(/*eof=*/true, out);
  for (auto& [rank, s] : ranks_) s.relay(prefix_of(rank), /*eof=*/true, out);
  untagged_.relay("", /*eof=*/true, out);
  if (!untagged_line_.empty()) scan_mpirun_line(untagged_line_);
  untagged_line_.clear();
}

std::vector<RankFailure> TagDemux::take_failures() { return std::exchange(failures_, {}); }

// Whether a tag starts at s[i]; kPartial when s ends inside something that may still become one.
TagDemux::Match TagDemux::match_tag(const std::string& s, size_t i, int* rank, size_t* len) {
  size_t j = i;
  auto expect = [&](char c) -> Match {
    if (j >= s.size()) return kPartial;
    if (s[j] != c) return kNo;
    ++j;
    return kFull;
  };
  auto number = [&](long* v) -> Match {
    const size_t start = j;
    *v = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') {
      if (j - start >= 9) return kNo;
      *v = *v * 10 + (s[j++] - '0');
    }
    if (j >= s.size()) return kPartial;
    return j == start ? kNo : kFull;
  };
  long job = 0, r = 0;
  Match m = kFull;
  if ((m = expect('[')) != kFull || (m = number(&job)) != kFull || (m = expect(',')) != kFull ||
      (m = number(&r)) != kFull || (m = expect(']')) != kFull || (m = expect('<')) != kFull)
    return m;
  for (const char* name : {"stdout>:", "stderr>:", "stddiag>:"}) {
    const size_t n = std::strlen(name), have = std::min(n, s.size() - j);
    if (s.compare(j, have, name, have) != 0) continue;
    if (have < n) return kPartial;
    *rank = static_cast<int>(r);
    *len = j + n - i;
    return kFull;
  }
  return kNo;
}

std::string TagDemux::prefix_of(int rank) const { return prefix_ ? "[" + std::to_string(rank) + "] " : ""; }

Stream& TagDemux::stream_of(int rank) {
  Stream& s = ranks_[rank];
  s.dest = dest_;
  return s;
}

void TagDemux::parse(bool eof, Output& out) {
  size_t i = 0;
  while (i < buf_.size()) {
    if (cur_ == kSegmentStart) {
      int rank = 0;
      size_t len = 0;
      Match m = match_tag(buf_, i, &rank, &len);
      if (m == kPartial && !eof) break;
      if (m == kFull) {
        cur_ = rank;
        i += len;
        continue;
      }
      cur_ = kUntagged;
    }
    // The segment runs to the newline, or to the next tag (a chunk that ended mid-line).
    size_t j = i;
    bool newline = false, tag = false, partial = false;
    for (; j < buf_.size(); ++j) {
      if (buf_[j] == '\n') {
        newline = true;
        break;
      }
      if (buf_[j] == '[' && cur_ != kUntagged) {
        int rank = 0;
        size_t len = 0;
        Match m = match_tag(buf_, j, &rank, &len);
        if (m == kFull) tag = true;
        if (m == kPartial && !eof) partial = true;
        if (tag || partial) break;
      }
    }
    const size_t end = newline ? j + 1 : j;
    if (cur_ == kUntagged) {
      untagged_line_.append(buf_, i, end - i);
      if (newline) {
        scan_mpirun_line(untagged_line_);
        untagged_line_.clear();
      }
      untagged_.pending.append(buf_, i, end - i);
      untagged_.relay("", /*eof=*/false, out);
    } else {
      Stream& s = stream_of(cur_);
      s.pending.append(buf_, i, end - i);
      s.relay(prefix_of(cur_), /*eof=*/false, out);
    }
    i = end;
    if (newline || tag) cur_ = kSegmentStart;
    if (partial) break;
  }
  buf_.erase(0, i);
}

// mpirun's reports, e.g.
//   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
//   "  Process name: [[19502,1],1]" followed by "  Exit code:    3"
//   "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD" followed by "with errorcode 3."
void TagDemux::scan_mpirun_line(const std::string& line) {
  const char* p = line.c_str();
  while (*p == ' ' || *p == '\t') ++p;
  int rank = -1, value = 0;
  if (std::sscanf(p, "mpirun noticed that process rank %d with PID %*d on node %*s exited on signal %d", &rank,
                  &value) == 2) {
    const char* name = sigdescr_np(value);
    failures_.push_back({rank, 128 + value,
                         "exited with signal " + std::to_string(value) + " (" +
                             (name != nullptr ? name : "unknown signal") + ")"});
  } else if (std::sscanf(p, "Process name: [[%*d,%*d],%d]", &rank) == 1) {
    process_name_rank_ = rank;
  } else if (process_name_rank_ >= 0 && std::sscanf(p, "Exit code: %d", &value) == 1) {
    failures_.push_back({process_name_rank_, value, "exited with status " + std::to_string(value)});
    process_name_rank_ = -1;
  } else if (std::sscanf(p, "MPI_ABORT was invoked on rank %d in communicator", &rank) == 1) {
    abort_rank_ = rank;
  } else if (abort_rank_ >= 0 && std::sscanf(p, "with errorcode %d", &value) == 1) {
    failures_.push_back({abort_rank_, value, "called MPI_Abort (errorcode " + std::to_string(value) + ")"});
    abort_rank_ = -1;
  }
}

}  // namespace mpcomm::launch_detail
