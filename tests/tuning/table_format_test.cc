// Selection tables as text (src/tuning/table_format.cc): what rows mean, that writing and reading give
// the same rows, and that bad input is refused naming the file, the line, the field and what was
// expected.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mpcomm/error.h"
#include "backends/native/algorithms/algorithms.h"
#include "backends/native/selection/selection.h"
#include "tuning/selection_table.h"

namespace mpcomm {
namespace {

tuning::Table parse(const std::string& text) { return tuning::parse_table(text, "tuning file t.txt", "native", native::vocabulary()); }

// The message of the InvalidArgument that parsing `text` throws ("" when it does not).
std::string refusal(const std::string& text) {
  try {
    parse(text);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

const std::string kHeader = "mpcomm-tuning 1 backend=native\n";

TEST(TableFormat, RowsAndTheirConditions) {
  const tuning::Table t = parse(kHeader + "# a comment\n\nallreduce ranks=2 dtype=float,half bytes=[64K,8M) cpus_per_rank=(0.5,1] "
                                          "in_place=no placement_now=near -> two_copy at=64K us=two_copy:12.5,direct:14\n"
                                          "allgather total=16K -> staged  # trailing comment\n");
  ASSERT_EQ(t.rows.size(), 2u);
  const tuning::Row& r = t.rows[0];
  EXPECT_EQ(r.line, 4);
  EXPECT_EQ(r.op, OpKind::allreduce);
  EXPECT_EQ(r.choice, "two_copy");
  EXPECT_EQ(r.notes, "at=64K us=two_copy:12.5,direct:14");
  EXPECT_TRUE(r.bytes.contains(64 << 10));
  EXPECT_TRUE(r.bytes.contains((8 << 20) - 1));
  EXPECT_FALSE(r.bytes.contains(8 << 20));
  EXPECT_FALSE(r.cpus_per_rank.contains(0.5));
  EXPECT_TRUE(r.cpus_per_rank.contains(1));
  EXPECT_TRUE(r.needs_call_facts());
  EXPECT_TRUE(r.matches(tuning::make_call(OpKind::allreduce, DataType::bfloat16, 64 << 9, 2)));
  EXPECT_FALSE(r.matches(tuning::make_call(OpKind::allreduce, DataType::int32, 64 << 8, 2))) << "int is not float or half";
  EXPECT_TRUE(r.matches(tuning::CallFacts{false, tuning::Placement::near}));
  EXPECT_FALSE(r.matches(tuning::CallFacts{true, tuning::Placement::near}));
  EXPECT_FALSE(r.matches(tuning::CallFacts{false, tuning::Placement::unknown}));
  // One value: exactly it; total = all blocks of a block op.
  const tuning::Row& s = t.rows[1];
  EXPECT_TRUE(s.matches(tuning::make_call(OpKind::allgather, DataType::uint8, 4096, 4)));
  EXPECT_FALSE(s.matches(tuning::make_call(OpKind::allgather, DataType::uint8, 4097, 4)));
}

TEST(TableFormat, WritingAndReadingGiveTheSameRows) {
  const tuning::Table t = parse(std::string(native::builtin_table_text()));
  std::string text = tuning::format_header("native") + "\n";
  for (const auto& r : t.rows) text += tuning::format_row(r) + "\n";
  const tuning::Table again = parse(text);
  ASSERT_EQ(again.rows.size(), t.rows.size());
  for (size_t i = 0; i < t.rows.size(); ++i) EXPECT_EQ(tuning::format_row(again.rows[i]), tuning::format_row(t.rows[i]));
  EXPECT_EQ(tuning::format_size(65536), "64K");
  EXPECT_EQ(tuning::format_size(87381), "87381");
  EXPECT_EQ(tuning::format_size(8 << 20), "8M");
}

TEST(TableFormat, BadInputNamesTheFileTheLineTheFieldAndWhatWasExpected) {
  struct Bad {
    std::string text, want;
  };
  const std::vector<Bad> bad = {
      {"", "tuning file t.txt, line 1: expected a header 'mpcomm-tuning 1 backend=NAME', got the end of the file"},
      {"allreduce -> flat\n", "line 1: expected a header 'mpcomm-tuning 1 backend=NAME' before any row"},
      {"mpcomm-tuning 2 backend=native\n", "line 1: field 'version': expected format version 1"},
      {"mpcomm-tuning 1 backend\n", "line 1: field 'backend': expected backend=NAME, got 'backend'"},
      {kHeader + "allreduse -> flat\n", "line 2: field 'subject': expected what backend native's rows choose for (allreduce, broadcast"},
      {kHeader + "send.path dtype=int -> ring\n", "line 2: field 'dtype' does not apply to send.path rows (they decide per message, by its size)"},
      {kHeader + "allgather.direct.stores placement_now=far -> plain\n",
       "line 2: field 'placement_now' does not apply to allgather.direct.stores rows (they are decided without a round of frames"},
      {kHeader + "send.path -> streaming\n", "line 2: field 'choice': expected one of backend native's choices for send.path (ring, single_copy), got 'streaming'"},
      {kHeader + "allreduce bytez=4 -> flat\n", "line 2: field 'bytez': no such field (expected one of dtype, ranks"},
      {kHeader + "allreduce bytes=64K-8M -> flat\n",
       "line 2: field 'bytes': expected an interval of sizes such as [64K,8M) or (0,32K], or one size such as 4K, got '64K-8M'"},
      {kHeader + "allreduce bytes=[8M,64K) -> flat\n", "field 'bytes': expected an interval of sizes"},
      {kHeader + "allreduce ranks=2.5 -> flat\n", "field 'ranks': expected an interval of whole numbers"},
      {kHeader + "allreduce in_place=maybe -> flat\n", "field 'in_place': expected yes or no, got 'maybe'"},
      {kHeader + "allreduce placement_now=close -> flat\n", "field 'placement_now': expected near or far, got 'close'"},
      {kHeader + "allreduce dtype=bfloat16 -> flat\n", "field 'dtype': expected int, float or half"},
      {kHeader + "allreduce ranks=2 ranks=3 -> flat\n", "line 2: field 'ranks' is given twice"},
      {kHeader + "\nallreduce ranks=2\n", "line 3: expected '-> CHOICE' after the conditions"},
      {kHeader + "allreduce -> fastest\n",
       "line 2: field 'choice': expected one of backend native's choices for allreduce (flat, ring, ring_shm, direct"},
      {kHeader + "broadcast -> ring\n", "field 'choice': expected one of backend native's choices for broadcast (binomial"},
      {kHeader + "allreduce -> flat fast=yes\n", "line 2: after the choice, expected at=SIZE"},
  };
  for (const Bad& b : bad) {
    const std::string got = refusal(b.text);
    EXPECT_NE(got.find(b.want), std::string::npos) << "input:\n" << b.text << "\ngot: " << got;
    EXPECT_NE(got.find("tuning file t.txt, line "), std::string::npos) << got;
  }
}

// One text may hold several backends' sections: each backend reads its own rows (with their line numbers
// in the whole text) and skips the others' unread; a text without a section for it has no rows for it.
// Protocol rows name their subject and keep its index in the vocabulary.
TEST(TableFormat, SectionsOfSeveralBackendsAndProtocolRows) {
  const std::string text = "mpcomm-tuning 1 backend=mpi\nallreduce bytes=[32M,inf) -> nonblocking\n" + kHeader +
                           "send.path placement=far bytes=[64K,inf) -> single_copy\nallreduce -> ring\n"
                           "mpcomm-tuning 1 backend=gloo\nanything at all -> goes here\n";
  const tuning::Table t = parse(text);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.sections, (std::vector<std::string>{"mpi", "native", "gloo"}));
  EXPECT_TRUE(t.has_section());
  EXPECT_EQ(t.rows[0].line, 4);
  EXPECT_EQ(t.rows[0].subject_name, "send.path");
  EXPECT_EQ(t.rows[0].subject, native::subject_of(native::PathPolicy::p2p));
  EXPECT_EQ(t.rows[0].op, OpKind::send);
  EXPECT_EQ(t.rows[0].placement, tuning::Placement::far);
  EXPECT_EQ(tuning::format_row(t.rows[0]), "send.path placement=far bytes=[64K,inf) -> single_copy");
  EXPECT_EQ(t.rows[1].subject, native::subject_of(OpKind::allreduce));
  const tuning::Table none = parse("mpcomm-tuning 1 backend=mpi\nallreduce -> blocking\n");
  EXPECT_TRUE(none.rows.empty());
  EXPECT_FALSE(none.has_section());
}

TEST(TableFormat, AFileThatCannotBeReadIsNamed) {
  try {
    tuning::load_table("/nonexistent/mpcomm-table.txt", "native", native::vocabulary());
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tuning file /nonexistent/mpcomm-table.txt: cannot be read"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpcomm
