// Grammar-constrained requests in the engine (docs/grammar.md): the output is always a prefix of
// a sentence of the grammar and a whole sentence when it ends on EOS; a constrained request's
// tokens are the same bits alone, among 1-64 others (constrained or not, greedy or sampled),
// with chunked prefill, on the host sampler and through Backend::ForwardMasked; the provenance
// names the grammar's digest; bad grammars are refused at Submit.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "inference/engine.h"
#include "inference/grammar/grammar.h"
#include "tests/inference/test_backend.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

struct Loaded {
  std::shared_ptr<const Model> model;
  Tokenizer tokenizer;
};

Loaded LoadTiny(ModelFamily family = ModelFamily::kQwen2) {
  const std::string dir = testing::SynthModelDir(family, "tiny");
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return {*m, *t};
}

// The test backend (the CPU, or CUDA under ROTE_TEST_BACKEND) with the choice of where rows are
// chosen: on_device makes the engine call ForwardMasked (the CUDA backend's own, which masks
// the logits on the device; Backend's default for the CPU), otherwise the engine masks and
// samples Forward's rows on the host. Counts the masked steps.
class DeviceLikeBackend : public Backend {
 public:
  DeviceLikeBackend(std::unique_ptr<Backend> inner, bool on_device) : inner_(std::move(inner)), on_device_(on_device) {}
  std::string device() const override { return inner_->device(); }
  std::string numerics_profile() const override { return inner_->numerics_profile(); }
  int64_t KvBytesPerBlock() const override { return inner_->KvBytesPerBlock(); }
  Status AllocateKvCache(int32_t n) override { return inner_->AllocateKvCache(n); }
  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override { return inner_->Forward(plan, logits); }
  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    return inner_->ForwardGreedy(plan, tokens);
  }
  Status ForwardGreedySteps(const BatchPlan& plan, int32_t steps, std::vector<int32_t>* tokens) override {
    return inner_->ForwardGreedySteps(plan, steps, tokens);
  }
  bool samples_on_device() const override { return on_device_; }
  Status ForwardSampled(const BatchPlan& plan, std::span<const RowSampling> rules,
                        std::vector<int32_t>* tokens) override {
    return inner_->samples_on_device() ? inner_->ForwardSampled(plan, rules, tokens)
                                       : Backend::ForwardSampled(plan, rules, tokens);
  }
  Status ForwardMasked(const BatchPlan& plan, std::span<const RowSampling> rules, const StepMasks& masks,
                       std::vector<int32_t>* tokens) override {
    ++masked_steps;
    return inner_->samples_on_device() ? inner_->ForwardMasked(plan, rules, masks, tokens)
                                       : Backend::ForwardMasked(plan, rules, masks, tokens);
  }
  int masked_steps = 0;

 private:
  std::unique_ptr<Backend> inner_;
  bool on_device_;
};

std::unique_ptr<Engine> MakeEngine(const Loaded& l, EngineOptions o, bool device_like = false,
                                   DeviceLikeBackend** raw = nullptr, bool cpu = false) {
  CpuBackendOptions b;
  b.max_positions = 1024;
  if (o.max_context == 0) o.max_context = 1024;
  auto backend = cpu ? CreateCpuBackend(l.model, b) : testing::CreateTestBackend(l.model, b);
  EXPECT_TRUE(backend.ok());
  auto wrapped = std::make_unique<DeviceLikeBackend>(std::move(backend).value(), device_like);
  if (raw != nullptr) *raw = wrapped.get();
  auto e = Engine::Create(l.model, l.tokenizer, std::move(wrapped), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

GenerationRequest Constrained(const std::string& prompt, const std::string& grammar, int max_tokens,
                              float temperature = 0.0f, uint64_t key = 0) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_k = temperature > 0 ? 40 : 0;
  r.sampling.top_p = temperature > 0 ? 0.95f : 1.0f;
  r.sampling.seed = 9;
  r.sampling_key = key;
  r.constraint.grammar = grammar;
  return r;
}

GenerationResult RunToEnd(Engine& e, GenerationRequest r) {
  auto id = e.Submit(std::move(r));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  auto res = e.Wait(*id);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return std::move(res).value();
}

// Whether a fresh matcher of `grammar` (compiled for the engine's token bytes) takes `tokens`,
// and whether the text is then complete.
struct Replayed {
  bool accepted = false;
  bool complete = false;
};
Replayed Replay(const Loaded& l, const std::string& grammar_text, const std::vector<int32_t>& tokens,
                std::optional<std::vector<std::string>> globals = std::nullopt) {
  const int32_t vocab = l.model->config().vocab_size;
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < vocab && id < l.tokenizer.vocab_size(); ++id)
    if (!l.tokenizer.IsSpecial(id)) bytes[static_cast<size_t>(id)] = l.tokenizer.TokenBytes(id);
  std::vector<int32_t> eos = l.tokenizer.stop_token_ids();
  for (int32_t id : l.model->config().eos_token_ids) eos.push_back(id);
  auto g = grammar::CompiledGrammar::Compile(grammar_text, bytes, eos);
  EXPECT_TRUE(g.ok()) << g.status().message();
  auto m = grammar::Matcher::Create(*g, std::move(globals));
  EXPECT_TRUE(m.ok());
  Replayed r;
  for (int32_t t : tokens)
    if (!m->AcceptToken(t)) return r;
  r.accepted = true;
  r.complete = m->IsComplete() || m->finished();
  return r;
}

const char* kChoice = R"(reply ::= "yes" | "no" | "maybe so" | "{" digits "}"
digits ::= DIGIT | DIGIT DIGIT | DIGIT DIGIT DIGIT
DIGIT = /[0-9]/
)";

TEST(EngineGrammar, OutputIsASentenceAndEndsOnEos) {
  Loaded l = LoadTiny();
  auto e = MakeEngine(l, {});
  std::set<std::string> seen;
  for (int i = 0; i < 12; ++i) {
    GenerationResult r = RunToEnd(*e, Constrained("question " + std::to_string(i) + ":", kChoice, 32, 1.0f, i));
    EXPECT_EQ(r.finish_reason, FinishReason::kEndOfSequence) << r.text;
    EXPECT_TRUE(r.text == "yes" || r.text == "no" || r.text == "maybe so" ||
                (r.text.size() >= 3 && r.text.front() == '{' && r.text.back() == '}'))
        << r.text;
    const Replayed rp = Replay(l, kChoice, r.tokens);
    EXPECT_TRUE(rp.accepted && rp.complete);
    seen.insert(r.text);
  }
  EXPECT_GE(seen.size(), 2u);  // sampling explores the grammar, it is not stuck on one reply
  // Unconstrained, the random-weight model writes anything but these.
  GenerationRequest free = Constrained("question 0:", "", 32);
  GenerationResult f = RunToEnd(*e, std::move(free));
  EXPECT_NE(f.text, "yes");
  EXPECT_FALSE(Replay(l, kChoice, f.tokens).accepted);
}

TEST(EngineGrammar, ShippedGrammarsGivePrefixesOfValidReplies) {
  Loaded l = LoadTiny();
  auto e = MakeEngine(l, {});
  const std::vector<std::string> globals = {"string", "table", "math", "tostring", "tonumber", "pairs", "ipairs"};
  for (const std::string name : {"lua_reply", "re2_reply", "json"}) {
    for (int k = 0; k < 3; ++k) {
      SCOPED_TRACE(name + " " + std::to_string(k));
      GenerationRequest req = Constrained("write it:", name, 80, k == 0 ? 0.0f : 0.8f, 100 + k);
      if (name == "lua_reply") req.constraint.allowed_globals = globals;
      GenerationResult r = RunToEnd(*e, std::move(req));
      const Replayed rp = Replay(l, std::string(grammar::BuiltinGrammar(name)), r.tokens,
                                 name == "lua_reply" ? std::optional(globals) : std::nullopt);
      EXPECT_TRUE(rp.accepted) << r.text;
      if (r.finish_reason == FinishReason::kEndOfSequence) { EXPECT_TRUE(rp.complete) << r.text; }
      if (name == "lua_reply") { EXPECT_EQ(r.text.rfind("```lua\n", 0), 0u) << r.text; }
      if (name == "re2_reply") { EXPECT_EQ(r.text.rfind("```re2\n", 0), 0u) << r.text; }
      EXPECT_EQ(r.provenance.grammar_digest.size(), 64u);
    }
  }
}

// The bits: each constrained request alone, then all of them together with unconstrained ones,
// greedy and sampled, in batches up to 64, with a prefill chunk that splits the prompts; and
// through ForwardMasked (the device path) instead of the host sampler.
TEST(EngineGrammar, ConstrainedTokensAreTheSameAloneBatchedChunkedAndOnTheDevicePath) {
  Loaded l = LoadTiny(ModelFamily::kLlama);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    const std::string grammar = i % 4 == 0 ? "" : i % 4 == 1 ? "lua_reply" : i % 4 == 2 ? "json" : kChoice;
    GenerationRequest r = Constrained("prompt number " + std::to_string(i) + std::string(i % 7, '!'), grammar, 24,
                                      i % 3 == 0 ? 0.0f : 0.9f, 1000 + i);
    if (grammar.empty()) r.sampling.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  auto copy = [](const GenerationRequest& r) {
    GenerationRequest c = r;
    return c;
  };
  EngineOptions alone_opts;
  alone_opts.max_batch = 1;
  auto alone = MakeEngine(l, alone_opts);
  std::vector<GenerationResult> want;
  for (const auto& r : reqs) want.push_back(RunToEnd(*alone, copy(r)));
  // On the CPU, whatever backend the suite runs on (under CUDA: the same tokens on both).
  auto on_cpu = MakeEngine(l, alone_opts, false, nullptr, /*cpu=*/true);
  for (size_t i = 0; i < reqs.size(); i += 5)
    EXPECT_EQ(RunToEnd(*on_cpu, copy(reqs[i])).tokens, want[i].tokens) << "request " << i << " on the CPU";

  struct Variant {
    const char* name;
    int32_t max_batch, prefill_chunk;
    bool device_like;
  };
  for (const Variant v : {Variant{"batch 64", 64, 256, false}, Variant{"batch 7, chunks of 5", 7, 5, false},
                          Variant{"batch 64 device path", 64, 256, true}, Variant{"batch 16 chunks of 3 device", 16, 3, true}}) {
    SCOPED_TRACE(v.name);
    EngineOptions o;
    o.max_batch = v.max_batch;
    o.prefill_chunk = v.prefill_chunk;
    o.prefill_fills_step = false;  // the variants' chunks, not the step's whole budget
    o.max_step_tokens = std::max(512, v.max_batch);
    DeviceLikeBackend* raw = nullptr;
    auto e = MakeEngine(l, o, v.device_like, &raw);
    std::vector<GenerationRequest> batch;
    for (const auto& r : reqs) batch.push_back(copy(r));
    auto ids = e->SubmitAll(std::move(batch));
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    for (size_t i = 0; i < ids->size(); ++i) {
      auto got = e->Wait((*ids)[i]);
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(got->tokens, want[i].tokens) << "request " << i;
      EXPECT_EQ(got->text, want[i].text) << "request " << i;
      EXPECT_EQ(got->provenance.grammar_digest, want[i].provenance.grammar_digest);
    }
    if (v.device_like) { EXPECT_GT(raw->masked_steps, 0); }
  }
}

// Near the end of its budget a reply is closed: every constrained request with a shipped
// grammar ends on a whole sentence (EOS), never cut off at max_tokens, greedy or sampled, and a
// byte-level model with random weights left alone would not close one.
TEST(EngineGrammar, RepliesCloseBeforeTheirBudgetEnds) {
  Loaded l = LoadTiny();
  const std::vector<std::string> globals = {"string", "table", "math", "tostring", "tonumber", "pairs", "ipairs"};
  for (const int32_t window : {48, 0}) {
    EngineOptions o;
    o.grammar_closing_tokens = window;
    o.max_batch = 32;
    auto e = MakeEngine(l, o);
    int closed = 0, total = 0;
    std::vector<GenerationRequest> reqs;
    std::vector<std::string> names;
    for (const std::string name : {"lua_reply", "re2_reply", "json"}) {
      for (int k = 0; k < 8; ++k) {
        GenerationRequest req = Constrained("reply " + std::to_string(k) + ":", name, 60 + 7 * k, k % 2 ? 0.9f : 0.0f, k);
        if (name == "lua_reply") req.constraint.allowed_globals = globals;
        reqs.push_back(std::move(req));
        names.push_back(name);
      }
    }
    auto ids = e->SubmitAll(std::move(reqs));
    ASSERT_TRUE(ids.ok());
    for (size_t i = 0; i < ids->size(); ++i) {
      auto r = e->Wait((*ids)[i]);
      ASSERT_TRUE(r.ok());
      const Replayed rp = Replay(l, std::string(grammar::BuiltinGrammar(names[i])), r->tokens,
                                 names[i] == "lua_reply" ? std::optional(globals) : std::nullopt);
      EXPECT_TRUE(rp.accepted) << r->text;
      ++total;
      if (r->finish_reason == FinishReason::kEndOfSequence && rp.complete) ++closed;
      if (window > 0) {
        EXPECT_EQ(r->finish_reason, FinishReason::kEndOfSequence) << names[i] << ": " << r->text;
        EXPECT_TRUE(rp.complete) << r->text;
      }
    }
    if (window == 0) { EXPECT_LT(closed, total) << "without closing, some replies run out of budget"; }
  }
}

TEST(EngineGrammar, DigestNamesTheGrammarAndTheAllowedNames) {
  GrammarConstraint a{"lua_reply", std::nullopt};
  GrammarConstraint text{std::string(grammar::BuiltinGrammar("lua_reply")), std::nullopt};
  GrammarConstraint names{"lua_reply", std::vector<std::string>{"string", "math"}};
  GrammarConstraint names_reordered{"lua_reply", std::vector<std::string>{"math", "string", "math"}};
  GrammarConstraint other_names{"lua_reply", std::vector<std::string>{"string"}};
  EXPECT_EQ(GrammarDigest({}), "");
  EXPECT_EQ(GrammarDigest(a), GrammarDigest(text));  // a name is its text
  EXPECT_NE(GrammarDigest(a), GrammarDigest(names));
  EXPECT_EQ(GrammarDigest(names), GrammarDigest(names_reordered));
  EXPECT_NE(GrammarDigest(names), GrammarDigest(other_names));
  EXPECT_NE(GrammarDigest(a), GrammarDigest({"json", std::nullopt}));
}

TEST(EngineGrammar, BadGrammarsAreRefusedAtSubmit) {
  Loaded l = LoadTiny();
  auto e = MakeEngine(l, {});
  for (const std::string bad : {"reply ::= missing_rule", "reply ::= \"unclosed", "= /x/", "lua_replyy"}) {
    SCOPED_TRACE(bad);
    auto id = e->Submit(Constrained("x", bad, 4));
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find("grammar"), std::string::npos) << id.status().message();
  }
  // A request with no constraint has no digest.
  GenerationResult r = RunToEnd(*e, Constrained("x", "", 2));
  EXPECT_EQ(r.provenance.grammar_digest, "");
}

}  // namespace
}  // namespace rote::inference
