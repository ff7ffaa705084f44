// Several replicas on one PostgreSQL database (docs/operations.md, "Several replicas on
// PostgreSQL"), end to end: real `rote serve` processes on the throwaway cluster of the PgCluster
// ctest fixture, driven over gRPC. A replica SIGKILLed with runs in flight loses none: once their
// leases expire the survivor runs them from their start, and each run's output and journal are
// recorded once. A replica that was stopped (SIGSTOP) while others took its runs over cannot
// record anything of them when it wakes. Watch on any replica streams every event of a run
// executing on another. Idempotent submission, etags and the four-eyes rule hold across
// replicas.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/generation.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/pg_e2e.h"
#include "tests/e2e/slow_words.h"
#include "tests/orchestrator/http_get.h"
#include "tests/store/pg_test_util.h"

extern char** environ;

namespace rote::e2e {
namespace {



constexpr int kRounds = 20;

std::string InputOf(int i, int spin) {
  return absl::StrCat(R"({"rounds": )", kRounds, R"(, "spin": )", spin, R"(, "word": "w)", i, R"("})");
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One `rote serve` process on the shared database, with a data directory of its own. Leases of
// 3 s renewed every 250 ms: a replica loses one only when twelve heartbeats in a row miss, which
// the takeover tests need not to happen to the survivor on a loaded 2-core machine (with 1.5 s,
// CI once saw the survivor lose a lease while the suite ran two tests at a time).
class Replica {
 public:
  Replica(std::string id, std::string store_url, std::string keys_file = "")
      : id_(std::move(id)), store_url_(std::move(store_url)), keys_file_(std::move(keys_file)) {
    dir_ = (std::filesystem::temp_directory_path() / absl::StrCat("rote-replica-", ::getpid(), "-", id_)).string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~Replica() {
    Kill(SIGKILL);
    std::filesystem::remove_all(dir_);
  }

  void Start() {
    port_ = FreePort();
    std::vector<std::string> args = {ROTE_BINARY, "serve", "--listen", absl::StrCat("127.0.0.1:", port_),
                                     "--data", dir_ + "/data", "--store", store_url_, "--replica-id", id_,
                                     "--lease-ms", "3000", "--heartbeat-ms", "250", "--metrics-listen",
                                     metrics_port_ == 0 ? "off" : absl::StrCat("127.0.0.1:", metrics_port_),
                                     "--http-listen", "off", "--drain-grace-ms", "0", "--grace-ms", "1000"};
    if (!keys_file_.empty()) args.insert(args.end(), {"--keys", keys_file_});
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);  // the log goes to stdout
    ASSERT_EQ(posix_spawn(&pid_, ROTE_BINARY, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
    runs_ = rote::v1::RunService::NewStub(channel_);
    blueprints_ = rote::v1::BlueprintService::NewStub(channel_);
    artifacts_ = rote::v1::ArtifactService::NewStub(channel_);
    auto health = grpc::health::v1::Health::NewStub(channel_);
    for (int i = 0; i < 600; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      grpc::health::v1::HealthCheckRequest req;
      grpc::health::v1::HealthCheckResponse res;
      if (health->Check(&ctx, req, &res).ok() && res.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "replica " << id_ << " did not start: " << Log();
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  std::unique_ptr<grpc::ClientContext> Context(int seconds = 60) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    return ctx;
  }
  void set_token(std::string token) { token_ = std::move(token); }
  // More flags for `rote serve` (from the next Start).
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }
  // Generates code for one fixed spec (GenerationService.Generate); the code it ends with, and
  // how many attempts the model started for it.
  grpc::StatusCode Generate(int* attempts) {
    auto stub = rote::v1::GenerationService::NewStub(channel_);
    rote::v1::GenerateRequest req;
    req.mutable_spec()->set_name("word");
    req.mutable_spec()->set_kind(rote::v1::ARTIFACT_KIND_RE2_PATTERN);
    req.mutable_spec()->set_task("Words of lowercase letters.");
    req.mutable_spec()->add_examples_json(R"({"input":"ab cd","matches":["ab","cd"]})");
    auto ctx = Context(120);
    auto reader = stub->Generate(ctx.get(), req);
    rote::v1::GenerateEvent e;
    while (reader->Read(&e)) *attempts += e.has_attempt_started() ? 1 : 0;
    return reader->Finish().error_code();
  }
  // Serve /metrics (from the next Start) and read it.
  void EnableMetrics() { metrics_port_ = FreePort(); }
  std::string Metrics() const { return test_http::HttpGet(metrics_port_, "/metrics"); }

  rote::v1::Blueprint Register(const std::string& source, const std::string& lockfile) {
    rote::v1::RegisterBlueprintRequest req;
    req.set_source(source);
    req.set_lockfile(lockfile);
    req.set_filename("slow_words.lua");
    rote::v1::Blueprint out;
    grpc::Status st = blueprints_->RegisterBlueprint(Context().get(), req, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }
  grpc::Status TrySubmit(const std::string& input, const std::string& request_id, rote::v1::Run* out) {
    rote::v1::SubmitRunRequest req;
    req.set_blueprint("blueprints/slow_words");
    req.set_input_json(input);
    req.set_request_id(request_id);
    return runs_->SubmitRun(Context().get(), req, out);
  }
  rote::v1::Run Submit(const std::string& input, const std::string& request_id = "") {
    rote::v1::Run out;
    grpc::Status st = TrySubmit(input, request_id, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }
  rote::v1::Run Get(const std::string& name) {
    rote::v1::GetRunRequest req;
    req.set_name(name);
    rote::v1::Run out;
    grpc::Status st = runs_->GetRun(Context().get(), req, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }
  std::vector<rote::v1::RunEvent> Watch(const std::string& name) {
    rote::v1::WatchRunRequest req;
    req.set_name(name);
    auto ctx = Context(120);
    auto reader = runs_->WatchRun(ctx.get(), req);
    std::vector<rote::v1::RunEvent> out;
    rote::v1::RunEvent e;
    while (reader->Read(&e)) out.push_back(e);
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }
  bool ReplayMatches(const std::string& name) {
    rote::v1::ReplayRunRequest req;
    req.set_name(name);
    rote::v1::ReplayRunResponse out;
    grpc::Status st = runs_->ReplayRun(Context().get(), req, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out.matched();
  }
  rote::v1::ArtifactService::Stub& artifacts() { return *artifacts_; }
  std::string Log() const {
    std::ifstream in(log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  const std::string& id() const { return id_; }

 private:
  std::string log_path() const { return dir_ + "/serve.log"; }
  std::string id_, store_url_, keys_file_, dir_, token_;
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::vector<std::string> extra_args_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rote::v1::RunService::Stub> runs_;
  std::unique_ptr<rote::v1::BlueprintService::Stub> blueprints_;
  std::unique_ptr<rote::v1::ArtifactService::Stub> artifacts_;
};

int TerminalStates(const std::vector<rote::v1::RunEvent>& events) {
  int n = 0;
  for (const rote::v1::RunEvent& e : events) {
    if (e.has_state() && (e.state() == rote::v1::RUN_STATE_SUCCEEDED || e.state() == rote::v1::RUN_STATE_FAILED ||
                          e.state() == rote::v1::RUN_STATE_CANCELLED)) {
      ++n;
    }
  }
  return n;
}

// Steps journaled by the attempt that finished: those after the last RUNNING state.
int StepsOfLastAttempt(const std::vector<rote::v1::RunEvent>& events) {
  int n = 0;
  for (const rote::v1::RunEvent& e : events) {
    if (e.has_state() && e.state() == rote::v1::RUN_STATE_RUNNING) n = 0;
    if (e.has_step()) ++n;
  }
  return n;
}

bool SaysTakenOver(const std::vector<rote::v1::RunEvent>& events) {
  for (const rote::v1::RunEvent& e : events) {
    if (e.has_log() && e.log().find("taken over by replica") != std::string::npos) return true;
  }
  return false;
}

// Every run succeeded once, with the journal of one whole attempt that replays to its output.
void ExpectEachRecordedOnce(Replica& r, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::vector<rote::v1::RunEvent> events = r.Watch(name);
    const rote::v1::Run run = r.Get(name);
    EXPECT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << name << ": " << run.error();
    EXPECT_EQ(TerminalStates(events), 1) << name;
    EXPECT_EQ(run.step_count(), kRounds) << name;
    EXPECT_EQ(StepsOfLastAttempt(events), kRounds) << name;
    EXPECT_TRUE(r.ReplayMatches(name)) << name;
  }
}

// Waits until `n` of the runs are running (claimed by a replica's worker).
void WaitForRunning(Replica& r, const std::vector<std::string>& names, int n) {
  for (int tries = 0; tries < 1500; ++tries) {
    int running = 0;
    for (const std::string& name : names) running += r.Get(name).state() == rote::v1::RUN_STATE_RUNNING ? 1 : 0;
    if (running >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "fewer than " << n << " runs got going";
}

// Starts both replicas and submits `runs` runs alternately to each (request ids `prefix`N); returns
// once six of them execute (each replica has four workers).
std::vector<std::string> StartBothWithRunsInFlight(Replica& a, Replica& b, int runs, int spin,
                                                   const std::string& prefix) {
  a.Start();
  b.Start();
  a.Register(kSlowWords, kSlowWordsLock);
  std::vector<std::string> names;
  for (int i = 0; i < runs; ++i) {
    names.push_back((i % 2 == 0 ? a : b).Submit(InputOf(i, spin), absl::StrCat(prefix, i)).name());
  }
  // Six running: at least two of them on A, whatever B claimed.
  WaitForRunning(a, names, 6);
  return names;
}

TEST(ReplicasE2e, SigkilledReplicasRunsAreTakenOverAndRecordedOnce) {
  ROTE_PG_SCHEMA_OR_RETURN(schema);
  Replica a("replica-a", schema.path());
  Replica b("replica-b", schema.path());
  b.EnableMetrics();
  // Both replicas execute runs (A at least two of them); the rest wait in the database.
  const std::vector<std::string> names = StartBothWithRunsInFlight(a, b, 12, 3000000, "take-");
  a.Kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();

  ExpectEachRecordedOnce(b, names);
  int taken_over = 0;
  for (const std::string& name : names) taken_over += SaysTakenOver(b.Watch(name)) ? 1 : 0;
  EXPECT_GE(taken_over, 1) << "the runs A was executing are taken over by B";
  EXPECT_NE(b.Log().find("taken over from replica replica-a"), std::string::npos) << b.Log();
  // The operator sees it: B's takeovers and claims, and the queue over every replica, drained.
  const std::string metrics = b.Metrics();
  for (const char* series : {"\nrote_run_lease_takeovers_total [1-9]", "\nrote_runs_claimed_total [1-9]",
                             "\nrote_store_runs\\{state=\"pending\"\\} 0\n", "\nrote_store_runs\\{state=\"running\"\\} 0\n",
                             "\nrote_run_leases_lost_total 0\n"}) {
    EXPECT_TRUE(std::regex_search(metrics, std::regex(series))) << series << " in\n" << metrics;
  }
  // A submission retried on the survivor after the kill gives the run A acknowledged.
  EXPECT_EQ(b.Submit(InputOf(2, 3000000), "take-2").name(), names[2]);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(50));
}

TEST(ReplicasE2e, StaleReplicaCannotRecordARunItLost) {
  ROTE_PG_SCHEMA_OR_RETURN(schema);
  Replica a("replica-a", schema.path());
  Replica b("replica-b", schema.path());
  const std::vector<std::string> names = StartBothWithRunsInFlight(a, b, 8, 3000000, "stale-");
  // A freezes (its heartbeats stop) while it holds four runs; B takes them over once the leases
  // expire and finishes them.
  a.Kill(SIGSTOP);
  for (const std::string& name : names) b.Watch(name);
  // A wakes: it still executes its attempts, and must record nothing of them.
  a.Kill(SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ExpectEachRecordedOnce(b, names);
  int taken_over = 0;
  for (const std::string& name : names) taken_over += SaysTakenOver(b.Watch(name)) ? 1 : 0;
  EXPECT_GE(taken_over, 1);
  const std::string log = a.Log();
  EXPECT_NE(log.find("lost its lease"), std::string::npos) << log;
  EXPECT_EQ(log.find("cannot record its success"), std::string::npos) << log;
}

TEST(ReplicasE2e, WatchOnAnyReplicaSeesEveryEventInOrder) {
  ROTE_PG_SCHEMA_OR_RETURN(schema);
  Replica a("replica-a", schema.path());
  Replica b("replica-b", schema.path());
  a.Start();
  b.Start();
  a.Register(kSlowWords, kSlowWordsLock);
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) names.push_back((i % 2 == 0 ? a : b).Submit(InputOf(i, 100000)).name());
  // Each run watched on both replicas from its start, while it executes on one of them.
  std::map<std::string, std::vector<rote::v1::RunEvent>> on_a, on_b;
  std::vector<std::thread> watchers;
  for (const std::string& name : names) {
    watchers.emplace_back([&, name] { on_a[name] = a.Watch(name); });
  }
  for (const std::string& name : names) {
    watchers.emplace_back([&, name] { on_b[name] = b.Watch(name); });
  }
  for (std::thread& t : watchers) t.join();
  for (const std::string& name : names) {
    const std::vector<rote::v1::RunEvent>& x = on_a[name];
    const std::vector<rote::v1::RunEvent>& y = on_b[name];
    ASSERT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].sequence(), static_cast<int64_t>(i)) << name;
      EXPECT_EQ(x[i].SerializeAsString(), y[i].SerializeAsString()) << name << " event " << i;
    }
    EXPECT_EQ(TerminalStates(x), 1) << name;
    EXPECT_EQ(StepsOfLastAttempt(x), kRounds) << name;
  }
}

// The sum of every series of a metric family in a /metrics text.
double SumOf(const std::string& metrics, const std::string& family) {
  double sum = 0;
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0 && line.rfind(family + " ", 0) != 0) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

TEST(ReplicasE2e, IdenticalGenerationsOnTwoReplicasReachTheModelOnce) {
  ROTE_PG_SCHEMA_OR_RETURN(schema);
  Replica a("replica-a", schema.path());
  Replica b("replica-b", schema.path());
  for (Replica* r : {&a, &b}) {
    // The fixture model has random weights: every attempt runs to its token limit and fails.
    r->set_extra_args({"--model", std::string(ROTE_BLUEPRINTS_DIR) + "/../tests/fixtures/qwen2", "--attempts", "3",
                       "--max-tokens", "256"});
    r->EnableMetrics();
    r->Start();
  }
  // The same request on both replicas at once: one asks its model, the other waits for the
  // outcome and is answered from its record.
  int attempts_a = 0, attempts_b = 0;
  grpc::StatusCode code_a = grpc::StatusCode::OK, code_b = grpc::StatusCode::OK;
  std::thread on_a([&] { code_a = a.Generate(&attempts_a); });
  std::thread on_b([&] { code_b = b.Generate(&attempts_b); });
  on_a.join();
  on_b.join();
  EXPECT_EQ(code_a, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(code_b, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(attempts_a + attempts_b, 3) << "one replica's three attempts, not both replicas'";
  const std::string ma = a.Metrics(), mb = b.Metrics();
  EXPECT_EQ(SumOf(ma, "rote_generation_attempts_total") + SumOf(mb, "rote_generation_attempts_total"), 3) << ma << mb;
  EXPECT_EQ(SumOf(ma, "rote_generation_cache_hits_total") + SumOf(mb, "rote_generation_cache_hits_total"), 1)
      << ma << mb;
}

TEST(ReplicasE2e, IdempotencyEtagsAndFourEyesHoldAcrossReplicas) {
  ROTE_PG_SCHEMA_OR_RETURN(schema);
  const std::string keys = (std::filesystem::temp_directory_path() / absl::StrCat("rote-replica-keys-", ::getpid()))
                               .string();
  std::ofstream(keys) << "bob-token-0123456789   bob   submit,review\n"
                         "carol-token-0123456789 carol review\n";
  Replica a("replica-a", schema.path(), keys);
  Replica b("replica-b", schema.path(), keys);
  a.Start();
  b.Start();
  a.set_token("bob-token-0123456789");
  b.set_token("bob-token-0123456789");
  a.Register(kSlowWords, kSlowWordsLock);

  // Idempotent submission: one request id, one run, whichever replica is asked; another
  // request under the same id is refused on either.
  const rote::v1::Run first = a.Submit(InputOf(1, 10), "nightly-1");
  EXPECT_EQ(b.Submit(InputOf(1, 10), "nightly-1").name(), first.name());
  rote::v1::Run other;
  EXPECT_EQ(b.TrySubmit(InputOf(2, 10), "nightly-1", &other).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Many concurrent retries on both replicas still make one run.
  std::set<std::string> made;
  std::mutex made_mu;
  std::vector<std::thread> retries;
  for (int i = 0; i < 8; ++i) {
    retries.emplace_back([&, i] {
      rote::v1::Run r = (i % 2 == 0 ? a : b).Submit(InputOf(5, 10), "nightly-5");
      std::lock_guard lock(made_mu);
      made.insert(r.name());
    });
  }
  for (std::thread& t : retries) t.join();
  EXPECT_EQ(made.size(), 1u);

  // Four eyes: bob proposes on A and may not approve his own proposal on B; carol approves on
  // B with the etag she read on A; the etag bob read before is stale on A.
  rote::v1::ProposeRevisionRequest propose;
  propose.set_generation_point("slow_words/shout");
  propose.set_source("return function(w) return (string.upper(w)) end");
  propose.set_comment("by hand");
  rote::v1::Artifact proposed;
  grpc::Status st = a.artifacts().ProposeRevision(a.Context().get(), propose, &proposed);
  ASSERT_TRUE(st.ok()) << st.error_message();
  rote::v1::ReviewArtifactRequest review;
  review.set_name(proposed.name());
  review.set_decision(rote::v1::REVIEW_STATE_APPROVED);
  review.set_etag(proposed.etag());
  review.set_comment("fine");
  rote::v1::Artifact out;
  st = b.artifacts().ReviewArtifact(b.Context().get(), review, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  a.set_token("carol-token-0123456789");
  b.set_token("carol-token-0123456789");
  rote::v1::GetArtifactRequest get;
  get.set_name(proposed.name());
  rote::v1::Artifact read_on_a;
  ASSERT_TRUE(a.artifacts().GetArtifact(a.Context().get(), get, &read_on_a).ok());
  review.set_etag(read_on_a.etag());
  st = b.artifacts().ReviewArtifact(b.Context().get(), review, &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(out.state(), rote::v1::REVIEW_STATE_APPROVED);
  review.set_decision(rote::v1::REVIEW_STATE_REJECTED);
  st = a.artifacts().ReviewArtifact(a.Context().get(), review, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED) << st.error_message();
  rote::v1::Artifact now_on_a;
  ASSERT_TRUE(a.artifacts().GetArtifact(a.Context().get(), get, &now_on_a).ok());
  EXPECT_EQ(now_on_a.state(), rote::v1::REVIEW_STATE_APPROVED);
  std::filesystem::remove(keys);
}

}  // namespace
}  // namespace rote::e2e
