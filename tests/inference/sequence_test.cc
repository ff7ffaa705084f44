// A sequence taking its tokens one by one (Sequence::Accept, what the engine does after every
// step): why it ends (a stop token, a stop sequence, max_tokens, the context), and which text
// streams when (never a byte of a stop sequence, nothing that could still become one).
#include "inference/sequence.h"

#include <gtest/gtest.h>

#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

const Tokenizer& Tiny() {
  static const Tokenizer tokenizer = [] {
    auto t = Tokenizer::Load(testing::SynthModelDir(ModelFamily::kQwen2, "tiny"));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return *t;
  }();
  return tokenizer;
}

// The token whose bytes are `c` alone.
int32_t ByteToken(char c) {
  for (int32_t id = 0; id < Tiny().vocab_size(); ++id) {
    if (Tiny().TokenBytes(id) == std::string(1, c)) return id;
  }
  ADD_FAILURE() << "no token for '" << c << "'";
  return 0;
}

Sequence Make(int32_t max_tokens, std::vector<std::string> stop = {}) {
  Sequence s;
  s.all = {ByteToken('p')};
  s.prompt_len = 1;
  s.sampling.max_tokens = max_tokens;
  s.sampling.stop = std::move(stop);
  s.decoder = std::make_unique<StreamDecoder>(Tiny());
  return s;
}

struct Fed {
  std::optional<FinishReason> finish;
  TokenEvent event;
};

Fed Feed(Sequence& s, int32_t token, const AcceptRules& rules) {
  Fed f;
  std::vector<float> logits;
  f.finish = s.Accept(token, &logits, rules, &f.event);
  return f;
}

TEST(SequenceTest, StreamsTextAndEndsAtMaxTokens) {
  Sequence s = Make(3);
  const AcceptRules rules{{}, 100, false};
  Fed a = Feed(s, ByteToken('a'), rules);
  EXPECT_FALSE(a.finish.has_value());
  EXPECT_EQ(a.event.index, 0);
  EXPECT_EQ(a.event.text, "a");
  EXPECT_EQ(Feed(s, ByteToken('b'), rules).event.index, 1);
  Fed c = Feed(s, ByteToken('c'), rules);
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.event.text, "c");
  EXPECT_EQ(s.text, "abc");
  EXPECT_EQ(s.result.tokens.size(), 3u);
  EXPECT_EQ(s.all.size(), 4u);  // the prompt, then what was generated
  EXPECT_TRUE(s.result.step_logits.empty());
}

TEST(SequenceTest, EndsWhenTheContextIsFull) {
  Sequence s = Make(100);
  const AcceptRules rules{{}, 3, false};
  EXPECT_FALSE(Feed(s, ByteToken('a'), rules).finish.has_value());
  EXPECT_EQ(Feed(s, ByteToken('b'), rules).finish, FinishReason::kLength);
}

TEST(SequenceTest, AStopTokenEndsItUnlessEosIsIgnored) {
  const int32_t stop = ByteToken('z');
  const std::vector<int32_t> stops = {stop};
  const AcceptRules rules{stops, 100, false};
  Sequence s = Make(100);
  Fed f = Feed(s, stop, rules);
  EXPECT_EQ(f.finish, FinishReason::kEndOfSequence);
  EXPECT_EQ(s.result.tokens, std::vector<int32_t>{stop});  // kept among the tokens
  EXPECT_EQ(s.text, "");                                    // not in the text
  Sequence t = Make(100);
  t.sampling.ignore_eos = true;
  EXPECT_FALSE(Feed(t, stop, rules).finish.has_value());
  EXPECT_EQ(t.text, "z");
}

TEST(SequenceTest, AStopSequenceIsHeldBackThenCut) {
  Sequence s = Make(100, {"xy"});
  const AcceptRules rules{{}, 100, false};
  EXPECT_EQ(Feed(s, ByteToken('a'), rules).event.text, "a");
  // "x" may start the stop sequence: it waits.
  Fed x = Feed(s, ByteToken('x'), rules);
  EXPECT_FALSE(x.finish.has_value());
  EXPECT_EQ(x.event.text, "");
  // "xx": the first x can no longer start it, the second still can.
  EXPECT_EQ(Feed(s, ByteToken('x'), rules).event.text, "x");
  Fed y = Feed(s, ByteToken('y'), rules);
  EXPECT_EQ(y.finish, FinishReason::kStopSequence);
  EXPECT_EQ(y.event.text, "");
  EXPECT_EQ(s.text, "ax");  // ends where the stop sequence begins
}

TEST(SequenceTest, CapturedLogitsAreKeptPerToken) {
  Sequence s = Make(100);
  const AcceptRules rules{{}, 100, true};
  std::vector<float> logits = {1.0f, 2.0f};
  TokenEvent ev;
  s.Accept(ByteToken('a'), &logits, rules, &ev);
  ASSERT_EQ(s.result.step_logits.size(), 1u);
  EXPECT_EQ(s.result.step_logits[0], (std::vector<float>{1.0f, 2.0f}));
}

TEST(SequenceTest, BlocksForRoundsUp) {
  EXPECT_EQ(BlocksFor(0), 0);
  EXPECT_EQ(BlocksFor(1), 1);
  EXPECT_EQ(BlocksFor(kKvBlockSize), 1);
  EXPECT_EQ(BlocksFor(kKvBlockSize + 1), 2);
}

}  // namespace
}  // namespace rote::inference
