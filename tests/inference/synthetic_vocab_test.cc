// The benchmarks' synthetic vocabulary (bench/inference/synthetic_vocab.h): the pieces file that
// pins the workload benchmark's tokenization must give back the exact pieces, refuse anything
// else, and give the vocabulary the source tree gives.
#include "bench/inference/synthetic_vocab.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace rote::bench {
namespace {

class SyntheticVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rote-synthetic-vocab-" + std::to_string(::getpid()) + "-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST_F(SyntheticVocabTest, PiecesFileRoundTripsEveryByte) {
  std::vector<std::string> pieces = {"ab", " the", std::string("\n\n", 2), std::string("\x00\xff", 2),
                                     "\xe4\xb8",  // a cut UTF-8 character
                                     std::string("\r\n\t ", 4)};
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  pieces.push_back(all);
  const fs::path file = dir_ / "w.vocab";
  ASSERT_TRUE(WritePieces(file, pieces));
  std::vector<std::string> back;
  std::string error;
  ASSERT_TRUE(ReadPieces(file, &back, &error)) << error;
  EXPECT_EQ(back, pieces);
}

TEST_F(SyntheticVocabTest, PiecesFileRefusesWhatItDidNotWrite) {
  struct Case {
    std::string text, why;
  };
  const std::vector<Case> cases = {
      {"", "not a pieces file"},
      {"rote synthetic vocabulary pieces v2\n6162\n", "not a pieces file"},
      {std::string(kPiecesHeader) + "\n616\nend 1\n", ":2: not an even run"},
      {std::string(kPiecesHeader) + "\n6162\n61G2\nend 2\n", ":3: not an even run"},
      {std::string(kPiecesHeader) + "\n6162\n4142\n41\nend 3\n", ":4: a piece has at least two bytes"},
      {std::string(kPiecesHeader) + "\n6162\n\nend 2\n", ":3: a piece has at least two bytes"},
      {std::string(kPiecesHeader) + "\n61 62\nend 1\n", ":2: not an even run"},
      {std::string(kPiecesHeader) + "\n6A6B\nend 1\n", ":2: not an even run"},  // uppercase is not what it writes
      {std::string(kPiecesHeader) + "\n6162\n6364\n", "no end line"},             // cut after a line
      {std::string(kPiecesHeader) + "\n", "no end line"},                           // the header alone
      {std::string(kPiecesHeader) + "\n6162\n6364\nend 3\n", "'end 3' but 2 pieces"},
      {std::string(kPiecesHeader) + "\n6162\nend 1\n6364\n", ":4: text after the end line"},
  };
  for (const Case& c : cases) {
    const fs::path file = dir_ / "bad.vocab";
    Write(file, c.text);
    std::vector<std::string> pieces = {"kept?"};
    std::string error;
    EXPECT_FALSE(ReadPieces(file, &pieces, &error)) << c.text;
    EXPECT_NE(error.find(c.why), std::string::npos) << c.text << " -> " << error;
  }
  std::vector<std::string> pieces;
  std::string error;
  EXPECT_FALSE(ReadPieces(dir_ / "missing.vocab", &pieces, &error));
  EXPECT_NE(error.find("cannot read"), std::string::npos) << error;
}

// The pinned pieces give the vocabulary the tree gave when they were written, and keep giving it
// after the tree's text changes (the reason the workload benchmark pins them).
TEST_F(SyntheticVocabTest, PinnedPiecesOutliveTheTree) {
  const fs::path tree = dir_ / "tree";
  Write(tree / "docs/a.md", "the quick brown fox jumps over the lazy dog; the dog sleeps.\n");
  Write(tree / "inference/b.cc", "int main() { return fox + dog; }  // the fox\n");
  const int size = 400;
  const std::vector<std::string> before = SyntheticVocab(size, tree);
  ASSERT_EQ(static_cast<int>(before.size()), size);
  const std::vector<std::string> ranked = RankedSourcePieces(tree, kWorkloadPieces);
  EXPECT_EQ(VocabFromPieces(size, ranked), before);
  const fs::path file = dir_ / "w.vocab";
  ASSERT_TRUE(WritePieces(file, ranked));

  Write(tree / "docs/c.md", "zebra zebra zebra zebra zebra zebra zebra zebra quagga quagga\n");
  EXPECT_NE(SyntheticVocab(size, tree), before) << "the tree's new text should change the derived vocabulary";
  std::vector<std::string> pinned;
  std::string error;
  ASSERT_TRUE(ReadPieces(file, &pinned, &error)) << error;
  EXPECT_EQ(VocabFromPieces(size, pinned), before);
}

}  // namespace
}  // namespace rote::bench
