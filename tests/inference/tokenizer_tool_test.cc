// `model tokenize | detokenize | chat` (inference/tokenizer/tokenizer_tool.h) on the qwen2
// fixture: what they print, and the errors bad input gets.
#include "inference/tokenizer/tokenizer_tool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "inference/tokenizer/tokenizer.h"

namespace rote::inference::tool {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kDir = std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2";

struct ToolRun {
  Status status;
  std::string out;
};

ToolRun RunTool(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  std::istringstream in(stdin_text);
  std::ostringstream out;
  ToolRun r{TokenizerCommand(args, in, out), ""};
  r.out = out.str();
  return r;
}

TEST(TokenizerTool, TokenizePrintsIdsAndPieces) {
  const Tokenizer tok = *Tokenizer::Load(kDir);
  const std::vector<int32_t> ids = tok.Encode("Hello, world<|im_end|>");
  const ToolRun r = RunTool({"tokenize", kDir, "--text", "Hello, world<|im_end|>"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  std::string want = std::to_string(ids.size()) + " tokens\n";
  for (size_t i = 0; i < ids.size(); ++i) want += (i ? " " : "") + std::to_string(ids[i]);
  EXPECT_THAT(r.out, StartsWith(want + "\n"));
  EXPECT_THAT(r.out, HasSubstr("\t\"<|im_end|>\"\t\"<|im_end|>\"\tspecial\n"));
  // Special tokens as text, JSON output, standard input.
  const ToolRun plain = RunTool({"tokenize", kDir, "--special-as-text", "--json"}, "a<|im_end|>");
  ASSERT_TRUE(plain.status.ok());
  EXPECT_THAT(plain.out, HasSubstr("\"ids\":["));
  EXPECT_THAT(plain.out, ::testing::Not(HasSubstr("<|im_end|>\"")));
}

TEST(TokenizerTool, DetokenizeRoundTripsAndRefusesBadIds) {
  const Tokenizer tok = *Tokenizer::Load(kDir);
  std::string ids;
  for (int32_t id : tok.Encode("def f(x):\n    return x")) ids += std::to_string(id) + ",";
  ids.pop_back();
  ToolRun r = RunTool({"detokenize", kDir, "--ids", ids});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.out, "def f(x):\n    return x\n");
  r = RunTool({"detokenize", kDir}, ids);  // from standard input
  EXPECT_EQ(r.out, "def f(x):\n    return x\n");

  r = RunTool({"detokenize", kDir, "12", "abc"});
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status.message(), HasSubstr("'abc' is not a token id"));
  r = RunTool({"detokenize", kDir, "--ids", "1,-3"});
  EXPECT_THAT(r.status.message(), HasSubstr("token id -3 names no token"));
  r = RunTool({"detokenize", kDir, "99999999999999999999"});
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerTool, ChatRendersTheTemplateAndItsIds) {
  const Tokenizer tok = *Tokenizer::Load(kDir);
  const std::string prompt = tok.ApplyChatTemplate({{"system", "Be terse."}, {"user", "2+2?"}}, true);
  const ToolRun r = RunTool({"chat", kDir, "--system", "Be terse.", "--user", "2+2?"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_THAT(r.out, StartsWith(prompt));
  EXPECT_THAT(r.out, HasSubstr("-- " + std::to_string(tok.Encode(prompt).size()) + " tokens\n"));

  const std::string file = ::testing::TempDir() + "/messages.json";
  std::ofstream(file) << R"([{"role": "user", "content": "hi"}])";
  const ToolRun j = RunTool({"chat", kDir, "--messages", file, "--no-generation-prompt", "--json"});
  ASSERT_TRUE(j.status.ok()) << j.status.ToString();
  EXPECT_THAT(j.out, HasSubstr(R"("prompt":)"));
  std::ofstream(file) << R"({"role": "user"})";
  const ToolRun bad = RunTool({"chat", kDir, "--messages", file});
  EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status.message(), HasSubstr("messages.json"));
}

TEST(TokenizerTool, BadCommandLinesAreUsageErrorsAndMissingDirsNotFound) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"tokenize"}, {"tokenize", kDir, "--bogus"}, {"tokenize", kDir, "--text"}, {"chat", kDir},
           {"tokenize", kDir, "--text", "a", "--file", "b"}, {"detokenize", kDir, "--skip-special=yes"}}) {
    const ToolRun r = RunTool(args);
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << args.back();
    EXPECT_THAT(r.status.message(), StartsWith("usage:")) << args.back();
  }
  const ToolRun missing = RunTool({"tokenize", "/nonexistent/model", "--text", "x"});
  EXPECT_EQ(missing.status.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status.message(), HasSubstr("tokenizer.json"));
  const ToolRun no_file = RunTool({"tokenize", kDir, "--file", "/nonexistent/input.txt"});
  EXPECT_EQ(no_file.status.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace rote::inference::tool
