// Settings (src/settings/settings.h): every MPCOMM_* value is checked when a communicator is created,
// used or not, and refused naming the setting, its value and what it takes; a flag beats the environment,
// which beats the default; an MPCOMM_* name that is not a setting is warned about once, with a guess.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness/process.h"
#include "harness/thread_world.h"
#include "settings/settings.h"

namespace mpcomm {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Sets an environment variable for one test and puts the old value back.
struct EnvVar {
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~EnvVar() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// The message of creating a 2-rank native world with these params ("" when it is created).
std::string creation_error(std::map<std::string, std::string> params, int ranks = 2) {
  Options o;
  o.timeout = Millis(20000);
  o.params = std::move(params);
  try {
    testing::ThreadWorld w("native", ranks, o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Settings, EveryDefaultIsAValueItsSettingTakes) {
  for (const ParamInfo& p : all_params()) EXPECT_EQ(value_problem(p, p.def), "") << p.name << "='" << p.def << "'";
}

TEST(Settings, EachKindRefusesWhatItDoesNotTake) {
  auto problem = [](const char* name, const std::string& v) {
    for (const ParamInfo& p : all_params())
      if (std::string(p.name) == name) return value_problem(p, v);
    return std::string("no such setting");
  };
  EXPECT_EQ(problem("MPCOMM_TCP_STREAMS", "-3"), "expected a whole number from 1 to 64");
  EXPECT_EQ(problem("MPCOMM_TCP_STREAMS", "65"), "expected a whole number from 1 to 64");
  EXPECT_EQ(problem("MPCOMM_TCP_STREAMS", "2x"), "expected a whole number from 1 to 64");
  EXPECT_EQ(problem("MPCOMM_TCP_STREAMS", "64"), "");
  EXPECT_EQ(problem("MPCOMM_TIMEOUT", "abc"), "expected a number from 0.001 to 1000000000");
  EXPECT_EQ(problem("MPCOMM_TIMEOUT", "0"), "expected a number from 0.001 to 1000000000");
  EXPECT_EQ(problem("MPCOMM_TIMEOUT", "2.5"), "");
  EXPECT_EQ(problem("MPCOMM_CHECK", "yes"), "expected 0 or 1");
  EXPECT_EQ(problem("MPCOMM_MPI_CALLS", "fast"), "expected one of auto,blocking,nonblocking");
  EXPECT_EQ(problem("MPCOMM_DEBUG", "info"), "") << "choices in any case";
  EXPECT_EQ(problem("MPCOMM_KERNELS", ""), "") << "unset: the default";
  EXPECT_EQ(problem("MPCOMM_DEVICE", "tpu"), "expected cpu, cuda or cuda:N");
  EXPECT_EQ(problem("MPCOMM_FAR_NS", "-1"), "") << "negative: always far";
}

// The cases: a bad value is refused at creation whether or not this run reads it — TCP streams on
// one host (no TCP link), the mpi backend's calls on native — naming every bad setting at once.
TEST(Settings, BadValuesAreRefusedAtCreationUsedOrNot) {
  std::string e = creation_error({{"MPCOMM_TCP_STREAMS", "-3"}});
  EXPECT_TRUE(contains(e, "MPCOMM_TCP_STREAMS='-3' (Options::params): expected a whole number from 1 to 64")) << e;
  e = creation_error({{"MPCOMM_MPI_CALLS", "fast"}, {"MPCOMM_SPIN_US", "-1"}});
  EXPECT_TRUE(contains(e, "MPCOMM_SPIN_US='-1' (Options::params): expected a whole number from 0 to")) << e;
  EXPECT_TRUE(contains(e, "MPCOMM_MPI_CALLS='fast' (Options::params): expected one of auto,blocking,nonblocking")) << e;
  EnvVar timeout("MPCOMM_TIMEOUT", "abc");
  e = creation_error({});
  EXPECT_TRUE(contains(e, "MPCOMM_TIMEOUT='abc': expected a number from 0.001 to 1000000000")) << e;
}

// Another backend's settings are checked by the one created: a forced native algorithm that does not
// exist fails a gloo communicator too.
TEST(Settings, AnotherBackendsSettingsAreCheckedToo) {
  const auto backends = testing::thread_backends();
  if (std::find(backends.begin(), backends.end(), "gloo") == backends.end()) GTEST_SKIP() << "no gloo backend in this build";
  Options o;
  o.timeout = Millis(20000);
  o.params = {{"MPCOMM_ALGO", "allreduce=fastest"}};
  try {
    testing::ThreadWorld w("gloo", 2, o);
    FAIL() << "created";
  } catch (const std::exception& e) {
    EXPECT_TRUE(contains(e.what(), "MPCOMM_ALGO entry 'allreduce=fastest': allreduce has no native algorithm 'fastest'")) << e.what();
  }
}

TEST(Settings, UnknownNamesAreFoundWithAGuessButTheTestsOwnAreNot) {
  EnvVar typo("MPCOMM_TIMEOUTT", "5");
  EnvVar far("MPCOMM_NOTHING_LIKE_IT", "1");
  EnvVar ours("MPCOMM_TEST_SOMETHING", "1");
  const std::vector<std::string> u = unknown_settings();
  EXPECT_NE(std::find(u.begin(), u.end(), "MPCOMM_TIMEOUTT (did you mean MPCOMM_TIMEOUT?)"), u.end());
  EXPECT_NE(std::find(u.begin(), u.end(), "MPCOMM_NOTHING_LIKE_IT"), u.end());
  for (const auto& name : u) EXPECT_FALSE(contains(name, "MPCOMM_TEST_")) << name;
}

// What a user sees: one warning per process, from the first communicator, naming the unknown setting.
TEST(Settings, AnUnknownNameIsWarnedOnceWhenACommunicatorIsCreated) {
  auto r = testing::run_command("MPCOMM_TIMEOUTT=5 " + std::string(MPCOMM_CLI) + " launch -n 2 -- " + MPCOMM_CLI +
                                " selftest -c 8 -d float32");
  EXPECT_EQ(r.status, 0) << r.output;
  const std::string warning = "MPCOMM_TIMEOUTT (did you mean MPCOMM_TIMEOUT?) is set in the environment but is not an mpcomm setting";
  EXPECT_TRUE(contains(r.output, "[0] mpcomm[pid ")) << r.output;
  size_t count = 0;
  for (size_t at = r.output.find(warning); at != std::string::npos; at = r.output.find(warning, at + 1)) ++count;
  EXPECT_EQ(count, 2u) << "once per rank (process)\n" << r.output;
}

// mpcomm launch: a flag beats the environment, which beats the default; a bad value in the
// environment is refused, naming it, before any rank starts.
TEST(Settings, LaunchPassesTheUsersTimeoutAndBackend) {
  const std::string cli = MPCOMM_CLI;
  auto r = testing::run_command("MPCOMM_TIMEOUT=20 MPCOMM_BACKEND=gloo " + cli + " launch -n 2 -- sh -c 'echo got $MPCOMM_TIMEOUT $MPCOMM_BACKEND'");
  EXPECT_TRUE(contains(r.output, "[0] got 20 gloo")) << r.output;
  EXPECT_TRUE(contains(r.output, "[1] got 20 gloo")) << r.output;
  r = testing::run_command("MPCOMM_TIMEOUT=20 " + cli + " launch -n 1 --timeout 7 --backend native -- sh -c 'echo got $MPCOMM_TIMEOUT $MPCOMM_BACKEND'");
  EXPECT_TRUE(contains(r.output, "[0] got 7 native")) << r.output;
  r = testing::run_command("env -u MPCOMM_TIMEOUT -u MPCOMM_BACKEND " + cli + " launch -n 1 -- sh -c 'echo got $MPCOMM_TIMEOUT $MPCOMM_BACKEND'");
  EXPECT_TRUE(contains(r.output, "[0] got 300 native")) << r.output;
  r = testing::run_command("MPCOMM_TIMEOUT=abc " + cli + " launch -n 1 -- true");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "MPCOMM_TIMEOUT='abc' (environment): expected a number from 0.001 to 1000000000")) << r.output;
}

// Command-line ranges in words, not as the range of a double.
TEST(Settings, CommandLineRangesInWords) {
  const std::string cli = MPCOMM_CLI;
  auto r = testing::run_command(cli + " bench --ranks 0");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--ranks: must be a whole number of at least 1, got '0'")) << r.output;
  EXPECT_FALSE(contains(r.output, "179769")) << r.output;
  r = testing::run_command(cli + " launch -n 2 --timeout -1 -- true");
  EXPECT_TRUE(contains(r.output, "--timeout: must be a number above 0, got '-1'")) << r.output;
}

}  // namespace
}  // namespace mpcomm
