// Draining (docs/operations.md): a server that shuts down with many runs in flight fails none of
// them. It refuses new runs with UNAVAILABLE, lets runs finish within the drain grace, and puts
// the rest back in the queue; the next server on the same data runs those from their start, to
// the same outputs and journals as an uninterrupted run.
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/slow_words.h"

namespace rote::e2e {
namespace {

constexpr int kRuns = 10;
constexpr int kRounds = 30;

std::string InputOf(int i) {
  return absl::StrCat(R"({"rounds": )", kRounds, R"(, "spin": 800000, "word": "w)", i, R"("})");
}

std::vector<rote::v1::RunEvent> History(TestServer& server, const std::string& run) { return server.Watch(run); }

bool SaysRequeued(const std::vector<rote::v1::RunEvent>& events) {
  for (const rote::v1::RunEvent& e : events) {
    if (e.has_log() && e.log().find("re-queued by a draining server") != std::string::npos) return true;
  }
  return false;
}

// What each input gives when nothing interrupts it.
std::map<int, std::string> UninterruptedOutputs() {
  TestServer server;
  server.Start(/*run_workers=*/4);
  server.Register(kSlowWords, kSlowWordsLock, "slow_words.lua");
  std::vector<std::string> names;
  for (int i = 0; i < kRuns; ++i) names.push_back(server.Submit("blueprints/slow_words", InputOf(i)).name());
  std::map<int, std::string> out;
  for (int i = 0; i < kRuns; ++i) {
    rote::v1::Run run = server.WaitDone(names[i]);
    EXPECT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
    out[i] = run.output_json();
  }
  return out;
}

TEST(DrainE2e, ShutdownWithRunsInFlightFailsNoneAndTheNextServerFinishesThem) {
  const std::map<int, std::string> expected = UninterruptedOutputs();

  TestServer server;
  server.set_configure([](orchestrator::ServerOptions* opt) {
    opt->drain = std::chrono::milliseconds(200);  // NOT_SERVING, refusing runs, before the grace
    opt->drain_grace = std::chrono::milliseconds(100);
  });
  server.Start(/*run_workers=*/4);
  server.Register(kSlowWords, kSlowWordsLock, "slow_words.lua");
  std::vector<std::string> names;
  for (int i = 0; i < kRuns; ++i) names.push_back(server.Submit("blueprints/slow_words", InputOf(i)).name());
  // Every worker busy, with journaled steps.
  for (int tries = 0; tries < 400; ++tries) {
    int with_steps = 0;
    for (const std::string& n : names) with_steps += server.Get(n).step_count() > 0 ? 1 : 0;
    if (with_steps >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // A channel of our own: TestServer::Stop drops its stubs before shutting down.
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials());
  auto runs = rote::v1::RunService::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  std::thread stopper([&] { server.Stop(); });
  grpc::health::v1::HealthCheckResponse serving;
  serving.set_status(grpc::health::v1::HealthCheckResponse::SERVING);
  for (int i = 0; i < 200 && serving.status() == grpc::health::v1::HealthCheckResponse::SERVING; ++i) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    if (!health->Check(&ctx, req, &serving).ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(serving.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  {
    rote::v1::SubmitRunRequest req;
    req.set_blueprint("blueprints/slow_words");
    req.set_input_json(InputOf(99));
    rote::v1::Run refused;
    grpc::ClientContext ctx;
    grpc::Status st = runs->SubmitRun(&ctx, req, &refused);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    EXPECT_NE(st.error_message().find("draining"), std::string::npos) << st.error_message();
  }
  stopper.join();

  // Stopped: none failed, some went back to the queue with their journal dropped.
  {
    std::unique_ptr<store::Store> store = [&] {
      store::StoreOptions o;
      o.path = server.data_dir();
      auto s = store::Store::Open(o);
      EXPECT_TRUE(s.ok()) << s.status();
      return s.ok() ? *std::move(s) : nullptr;
    }();
    ASSERT_NE(store, nullptr);
    int pending = 0;
    for (int64_t id = 1; id <= kRuns; ++id) {
      absl::StatusOr<store::RunRecord> r = store->GetRun(id);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_NE(r->state, store::RunState::kFailed) << "run " << id << ": " << r->error;
      EXPECT_NE(r->state, store::RunState::kRunning) << "run " << id;
      if (r->state == store::RunState::kPending) {
        ++pending;
        EXPECT_EQ(r->step_count, 0) << "run " << id << " keeps the steps of its abandoned attempt";
        EXPECT_TRUE(store->ListSteps(id)->empty()) << "run " << id;
      }
    }
    EXPECT_GT(pending, 0) << "the runs were too fast to be in flight at shutdown";
  }

  server.Start(/*run_workers=*/4);
  int requeued = 0;
  for (int i = 0; i < kRuns; ++i) {
    rote::v1::Run run = server.WaitDone(names[i]);
    ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << names[i] << ": " << run.error();
    EXPECT_EQ(run.output_json(), expected.at(i)) << names[i];
    EXPECT_EQ(run.step_count(), kRounds) << names[i] << ": only the steps of the attempt that finished";
    rote::v1::ReplayRunResponse replay;
    grpc::Status st = server.Replay(names[i], &replay);
    ASSERT_TRUE(st.ok()) << names[i] << ": " << st.error_message();
    EXPECT_TRUE(replay.matched()) << names[i] << " step " << replay.first_mismatch_step();
    requeued += SaysRequeued(History(server, names[i])) ? 1 : 0;
  }
  EXPECT_GT(requeued, 0) << "no run's history says it was re-queued";
}

TEST(DrainE2e, RunsThatFinishWithinTheGraceAreNotRequeued) {
  TestServer server;
  server.set_configure([](orchestrator::ServerOptions* opt) { opt->drain_grace = std::chrono::seconds(60); });
  server.Start(/*run_workers=*/2);
  server.Register(kSlowWords, kSlowWordsLock, "slow_words.lua");
  rote::v1::Run a = server.Submit("blueprints/slow_words", InputOf(1));
  rote::v1::Run b = server.Submit("blueprints/slow_words", InputOf(2));
  for (int tries = 0; tries < 400 && server.Get(b.name()).state() != rote::v1::RUN_STATE_RUNNING; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server.Stop();  // waits for both
  server.Start(/*run_workers=*/2);
  for (const rote::v1::Run& r : {a, b}) {
    rote::v1::Run done = server.Get(r.name());
    EXPECT_EQ(done.state(), rote::v1::RUN_STATE_SUCCEEDED) << r.name() << ": " << done.error();
    EXPECT_FALSE(SaysRequeued(History(server, r.name()))) << r.name();
  }
}

}  // namespace
}  // namespace rote::e2e
