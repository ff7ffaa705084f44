// Bad blueprints and lockfiles are INVALID_ARGUMENT naming the file and line; runs that cannot
// be bound are FAILED_PRECONDITION naming the points and how to bind them.
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

class BadBlueprintsE2e : public ::testing::Test {
 protected:
  void SetUp() override { server_.Start(); }

  // Registers and expects INVALID_ARGUMENT whose message contains every fragment.
  void ExpectInvalid(const std::string& source, const std::string& lockfile,
                     std::initializer_list<std::string> fragments) {
    rote::v1::Blueprint bp;
    grpc::Status st = server_.TryRegister(source, lockfile, "bad.lua", &bp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    for (const std::string& f : fragments) {
      EXPECT_NE(st.error_message().find(f), std::string::npos) << "'" << f << "' not in: " << st.error_message();
    }
  }

  TestServer server_;
};

TEST_F(BadBlueprintsE2e, SyntaxErrorNamesTheLine) {
  ExpectInvalid("local bp = rote.blueprint { name = \"x\" }\n\nfunction bp.run(input)\n  return input +\nend\nreturn bp\n", "",
                {"bad.lua:5:", "unexpected symbol near 'end'"});
}

TEST_F(BadBlueprintsE2e, MissingRunNamesTheBlueprintLine) {
  ExpectInvalid("-- a blueprint without run\nlocal bp = rote.blueprint { name = \"no_run\" }\nreturn bp\n", "",
                {"bad.lua:2:", "no run function"});
}

TEST_F(BadBlueprintsE2e, ChunkThatDoesNotReturnTheBlueprint) {
  ExpectInvalid("local bp = rote.blueprint { name = \"x\" }\nfunction bp.run(i) return i end\n", "",
                {"bad.lua:2:", "return bp"});
}

TEST_F(BadBlueprintsE2e, DuplicateGenerationPointNames) {
  ExpectInvalid(R"(local bp = rote.blueprint { name = "dup" }
local a = bp:regex { name = "words", task = "t", examples = { { "a b", { "a", "b" } } } }

local b = bp:lua { name = "words", task = "t", tests = { { 1, 2 } } }
function bp.run(i) return i end
return bp
)",
                "", {"bad.lua:4:", "'words' is already declared at line 2"});
}

TEST_F(BadBlueprintsE2e, ExamplesThatDoNotFitTheKind) {
  // A pattern given Lua-style tests.
  ExpectInvalid(R"(local bp = rote.blueprint { name = "k" }
local a = bp:regex { name = "words", task = "t", tests = { { "a", "b" } } }
function bp.run(i) return i end
return bp
)",
                "", {"bad.lua:2:", "unknown field 'tests' in bp:regex"});
  // Expected matches that are not strings.
  ExpectInvalid(R"(local bp = rote.blueprint { name = "k" }

local a = bp:regex { name = "nums", task = "t", examples = { { "1 2", { 1, 2 } } } }
function bp.run(i) return i end
return bp
)",
                "", {"bad.lua:3:", "example 1 of pattern 'nums'", "must be a string"});
  // A Lua test that is not { input, expected }.
  ExpectInvalid(R"(local bp = rote.blueprint { name = "k" }
local f = bp:lua { name = "f", task = "t", tests = { { 1, 2 }, { 3 } } }
function bp.run(i) return i end
return bp
)",
                "", {"bad.lua:2:", "test 2 of 'f' must be { input, expected_output }"});
  // No examples at all.
  ExpectInvalid(R"(local bp = rote.blueprint { name = "k" }
local f = bp:lua { name = "f", task = "t", tests = {} }
function bp.run(i) return i end
return bp
)",
                "", {"bad.lua:2:", "has no tests"});
}

TEST_F(BadBlueprintsE2e, RuntimeErrorWhileLoading) {
  ExpectInvalid("local bp = rote.blueprint { name = \"x\" }\nlocal t = nil\nlocal y = t.field\nreturn bp\n", "",
                {"bad.lua:3:", "attempt to index"});
}

TEST_F(BadBlueprintsE2e, LockfileErrorsNameTheLockfileLine) {
  ExpectInvalid(kWordStats, "format = 1\nblueprint = \"word_stats\"\n\n[[point]]\nname = \"nope\"\nkind = \"lua_function\"\nsource = 'return function() end'\n",
                {"bad.lock:4:", "'nope' is not declared", "words, shout"});
  ExpectInvalid(kWordStats, "format = 1\n[[point]]\nname = \"words\"\nkind = \"re2_pattern\"\nsource = '[a-z]'\n",
                {"bad.lock:2:", "fails its own spec", "example 1"});
  ExpectInvalid(kWordStats, "format = 1\n[[point]]\nname = \"words\"\nkind = \"re2_pattern\"\nartifact = \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"\nsource = '[A-Za-z]+'\n",
                {"bad.lock:2:", "hashes to sha256:"});
  ExpectInvalid(kWordStats, "format = 1\n[[point]]\nname = \"words\"\nkind = \"re2_pattern\"\nsource = '(?=x)[A-Za-z]+'\n",
                {"bad.lock:2:", "fails its own spec"});
  ExpectInvalid(kWordStats, "format = 1\nsource = 'x'\n", {"bad.lock:2:", "unknown key 'source'"});
}

TEST_F(BadBlueprintsE2e, UnboundPointsAreFailedPreconditionNamingThem) {
  rote::v1::Blueprint bp = server_.Register(kWordStats, "", "word_stats.lua");
  EXPECT_EQ(bp.bindings_size(), 0);
  rote::v1::SubmitRunRequest req;
  req.set_blueprint(bp.name());
  req.set_input_json(R"({"text": "x"})");
  rote::v1::Run run;
  grpc::ClientContext ctx;
  grpc::Status st = server_.runs().SubmitRun(&ctx, req, &run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  for (const char* f : {"words (re2_pattern)", "shout (lua_function)", "lockfile", "--model"}) {
    EXPECT_NE(st.error_message().find(f), std::string::npos) << f << " not in: " << st.error_message();
  }
}

TEST_F(BadBlueprintsE2e, BadInputsAndNames) {
  server_.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::SubmitRunRequest req;
  req.set_blueprint("blueprints/word_stats");
  req.set_input_json("{not json");
  rote::v1::Run run;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(server_.runs().SubmitRun(&ctx, req, &run).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  req.set_input_json("{}");
  req.set_blueprint("blueprints/nonexistent");
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(server_.runs().SubmitRun(&ctx, req, &run).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  req.set_blueprint("blueprints/word_stats");
  req.mutable_policy()->set_max_memory_bytes(1ll << 40);
  {
    grpc::ClientContext ctx;
    grpc::Status st = server_.runs().SubmitRun(&ctx, req, &run);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("max_memory_bytes"), std::string::npos);
  }
}

}  // namespace
}  // namespace rote::e2e
