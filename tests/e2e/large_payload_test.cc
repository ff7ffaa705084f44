// Run values of any accepted size stay readable, and never make responses that carry other
// runs too large: lists carry digests and sizes, GetRun carries small outputs inline, and
// ReadRunPayload streams any recorded value in chunks. The clients here keep gRPC's default
// 4 MiB receive limit, as any client may.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "orchestrator/engine/engine.h"
#include "store/digest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

// run({unit, count}) returns `unit` repeated `count` times; with fail = true it raises that
// string as its error instead.
constexpr char kBigValues[] = R"lua(local bp = rote.blueprint { name = "big_values", version = "1.0.0" }

function bp.run(input)
  local s = string.rep(input.unit, input.count)
  if input.fail then error(s, 0) end
  return s
end

return bp
)lua";

constexpr int64_t kMiB = 1 << 20;

std::string BigInput(int64_t count, const std::string& unit = "x", bool fail = false) {
  return absl::StrCat(R"({"count":)", count, R"(,"fail":)", fail ? "true" : "false", R"(,"unit":")", unit, R"("})");
}

struct Payload {
  grpc::Status status;
  std::string bytes;
  std::vector<rote::v1::RunPayloadChunk> chunks;  // without their data
  std::vector<size_t> chunk_sizes;
};

Payload Read(TestServer& server, const std::string& run, const std::string& digest) {
  rote::v1::ReadRunPayloadRequest req;
  req.set_name(run);
  req.set_digest(digest);
  auto ctx = server.Context(120);
  auto reader = server.runs().ReadRunPayload(ctx.get(), req);
  Payload p;
  rote::v1::RunPayloadChunk c;
  while (reader->Read(&c)) {
    p.bytes.append(c.data());
    p.chunk_sizes.push_back(c.data().size());
    c.clear_data();
    p.chunks.push_back(c);
  }
  p.status = reader->Finish();
  return p;
}

rote::v1::Run Succeeded(TestServer& server, const std::string& input) {
  rote::v1::Run run = server.WaitDone(server.Submit("blueprints/big_values", input).name());
  EXPECT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  return run;
}

TEST(LargePayloadE2e, SeventyMiBOutputIsReadInChunksWithItsDigest) {
  TestServer server;
  server.Start();
  server.Register(kBigValues, "", "big_values.lua");
  const int64_t count = 70 * kMiB;
  rote::v1::Run run = Succeeded(server, BigInput(count));
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED);

  // GetRun answered (with 4 MiB allowed): digest and size, the value left out.
  EXPECT_TRUE(run.output_omitted());
  EXPECT_TRUE(run.output_json().empty());
  EXPECT_EQ(run.output_size_bytes(), count + 2);  // the JSON string's quotes
  EXPECT_EQ(run.input_size_bytes(), static_cast<int64_t>(BigInput(count).size()));

  Payload out = Read(server, run.name(), "");
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  ASSERT_EQ(static_cast<int64_t>(out.bytes.size()), count + 2);
  EXPECT_EQ(store::Sha256Digest(out.bytes), run.output_digest());
  EXPECT_EQ(out.bytes, absl::StrCat("\"", std::string(static_cast<size_t>(count), 'x'), "\""));
  ASSERT_GE(out.chunks.size(), 70u);
  int64_t offset = 0;
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const rote::v1::RunPayloadChunk& c = out.chunks[i];
    EXPECT_EQ(c.offset(), offset) << "chunk " << i;
    EXPECT_EQ(c.digest(), run.output_digest());
    EXPECT_EQ(c.size_bytes(), count + 2);
    EXPECT_LE(out.chunk_sizes[i], static_cast<size_t>(kMiB)) << "chunk " << i;
    offset += static_cast<int64_t>(out.chunk_sizes[i]);
  }

  // Naming the output by its digest reads the same bytes; the input is readable too.
  Payload by_digest = Read(server, run.name(), run.output_digest());
  ASSERT_TRUE(by_digest.status.ok()) << by_digest.status.error_message();
  EXPECT_EQ(by_digest.bytes, out.bytes);
  Payload input = Read(server, run.name(), run.input_digest());
  ASSERT_TRUE(input.status.ok()) << input.status.error_message();
  EXPECT_EQ(input.bytes, BigInput(count));

  // Replay compares all 70 MiB, and its answer stays small.
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(replay.matched());
  EXPECT_EQ(replay.output_digest(), run.output_digest());
}

TEST(LargePayloadE2e, ReadRunPayloadReadsOnlyTheRunsOwnValues) {
  TestServer server;
  server.Start();
  server.Register(kBigValues, "", "big_values.lua");
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run mine = Succeeded(server, BigInput(3));
  rote::v1::Run other = Succeeded(server, BigInput(4, "y"));

  // Another run's values, and malformed digests, are not reachable through this run.
  Payload foreign = Read(server, mine.name(), other.output_digest());
  EXPECT_EQ(foreign.status.error_code(), grpc::StatusCode::NOT_FOUND) << foreign.status.error_message();
  EXPECT_TRUE(foreign.bytes.empty());
  foreign = Read(server, mine.name(), other.input_digest());
  EXPECT_EQ(foreign.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(foreign.bytes.empty());
  Payload bad = Read(server, mine.name(), "sha256:" + std::string(63, 'a') + "/");
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Payload missing = Read(server, "runs/999", "");
  EXPECT_EQ(missing.status.error_code(), grpc::StatusCode::NOT_FOUND);

  // A step's recorded input and output are values of its run.
  rote::v1::Run stats = server.Submit("blueprints/word_stats", R"({"text": "hi there"})");
  std::vector<rote::v1::RunEvent> events = server.Watch(stats.name());
  int steps = 0;
  for (const rote::v1::RunEvent& e : events) {
    if (!e.has_step()) continue;
    ++steps;
    for (const std::string& d : {e.step().input_digest(), e.step().output_digest()}) {
      Payload p = Read(server, stats.name(), d);
      ASSERT_TRUE(p.status.ok()) << p.status.error_message();
      EXPECT_EQ(store::Sha256Digest(p.bytes), d);
    }
  }
  EXPECT_EQ(steps, 3);
  // A small output still travels inline.
  rote::v1::Run done = server.Get(stats.name());
  EXPECT_FALSE(done.output_omitted());
  EXPECT_EQ(done.output_json(), R"({"count":2,"first":"HI","loud":["HI","THERE"]})");
  EXPECT_EQ(done.output_size_bytes(), static_cast<int64_t>(done.output_json().size()));

  // A run that did not succeed has no output to read.
  rote::v1::Run failed = server.WaitDone(server.Submit("blueprints/big_values", BigInput(3, "x", true)).name());
  ASSERT_EQ(failed.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_EQ(Read(server, failed.name(), "").status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(LargePayloadE2e, ListRunsCarriesDigestsAndSizesForEveryCaller) {
  TestServer server;
  const std::string keys = server.data_dir() + "/keys";
  {
    std::ofstream f(keys);
    f << "alice-token-0123456789 alice submit\n"
         "bob-token-0123456789   bob   submit\n";
  }
  server.Start(4, keys);
  server.set_token("alice-token-0123456789");
  server.Register(kBigValues, "", "big_values.lua");
  const int64_t count = 30 * kMiB;
  std::vector<std::string> alices;
  for (const char* unit : {"a", "b"}) alices.push_back(Succeeded(server, BigInput(count, unit)).name());
  server.set_token("bob-token-0123456789");
  const std::string bobs = Succeeded(server, BigInput(5, "c")).name();

  for (const char* token : {"alice-token-0123456789", "bob-token-0123456789"}) {
    server.set_token(token);
    rote::v1::ListRunsRequest req;
    rote::v1::ListRunsResponse resp;
    auto ctx = server.Context();
    grpc::Status st = server.runs().ListRuns(ctx.get(), req, &resp);
    ASSERT_TRUE(st.ok()) << token << ": " << st.error_message();
    EXPECT_LT(resp.ByteSizeLong(), 64u * 1024) << "a page of three runs carries no payloads";
    std::vector<std::string> own = token[0] == 'a' ? alices : std::vector<std::string>{bobs};
    for (const rote::v1::Run& r : resp.runs()) {
      EXPECT_TRUE(r.output_json().empty()) << r.name();
      EXPECT_TRUE(r.output_omitted()) << r.name();
      EXPECT_FALSE(r.output_digest().empty()) << r.name();
      EXPECT_GT(r.input_size_bytes(), 0) << r.name();
      std::erase(own, r.name());
      if (r.name() != bobs) {
        EXPECT_EQ(r.output_size_bytes(), count + 2) << r.name();
        // What the list names is what the chunks deliver.
        if (token[0] == 'a') {
          Payload p = Read(server, r.name(), r.output_digest());
          ASSERT_TRUE(p.status.ok()) << p.status.error_message();
          EXPECT_EQ(static_cast<int64_t>(p.bytes.size()), r.output_size_bytes());
          EXPECT_EQ(store::Sha256Digest(p.bytes), r.output_digest());
        }
      }
    }
    EXPECT_TRUE(own.empty()) << token << " does not see its own runs";
  }
}

TEST(LargePayloadE2e, OutputLargerThanTheMemoryLimitFailsTheRunClearly) {
  TestServer server;
  server.Start();
  server.Register(kBigValues, "", "big_values.lua");
  // 4 MiB of control characters fit a 16 MiB run, but their JSON (six bytes each) does not.
  rote::v1::SubmitRunRequest req;
  req.set_blueprint("blueprints/big_values");
  req.set_input_json(BigInput(4 * kMiB, "\\u0001"));
  req.mutable_policy()->set_max_memory_bytes(16 * kMiB);
  rote::v1::Run submitted;
  auto ctx = server.Context();
  grpc::Status st = server.runs().SubmitRun(ctx.get(), req, &submitted);
  ASSERT_TRUE(st.ok()) << st.error_message();
  rote::v1::Run run = server.WaitDone(submitted.name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_NE(run.error().find("run returned 25165826 bytes of JSON, more than the run's memory limit "
                             "(max_memory_bytes=16777216)"),
            std::string::npos)
      << run.error();
  EXPECT_NE(run.error().find("policy.max_memory_bytes"), std::string::npos) << run.error();
  EXPECT_TRUE(run.output_digest().empty());

  // The limit is part of the run's record: replay draws the line in the same place.
  rote::v1::ReplayRunResponse replay;
  st = server.Replay(run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(replay.matched()) << replay.recorded_json() << " vs " << replay.replayed_json();
}

TEST(LargePayloadE2e, HugeErrorIsCutWhenRecorded) {
  TestServer server;
  server.Start();
  server.Register(kBigValues, "", "big_values.lua");
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    names.push_back(server.Submit("blueprints/big_values", BigInput(30 * kMiB + i, "e", true)).name());
  }
  for (const std::string& name : names) {
    rote::v1::Run run = server.WaitDone(name);
    ASSERT_EQ(run.state(), rote::v1::RUN_STATE_FAILED);
    EXPECT_LE(run.error().size(), orchestrator::engine::kMaxRunErrorBytes + 64);
    EXPECT_NE(run.error().find(std::string(1000, 'e')), std::string::npos);
    EXPECT_NE(run.error().find("more bytes)"), std::string::npos);
    rote::v1::ReplayRunResponse replay;
    grpc::Status st = server.Replay(name, &replay);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(replay.matched()) << "the replayed error is cut the same way";
  }
  rote::v1::ListRunsRequest req;
  rote::v1::ListRunsResponse resp;
  auto ctx = server.Context();
  grpc::Status st = server.runs().ListRuns(ctx.get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.runs_size(), 3);
}

}  // namespace
}  // namespace rote::e2e
