// Fills a data directory for the review console's scale test (tests/browser/scale_test.cjs):
// N pending revisions of titles/title_case and M finished runs of the titles blueprint, each
// run with one step. The blueprint and its live revision 1 must already be registered (the
// test does that through the API); the rows are written through the store's own API, the one
// the server uses, with fsync at checkpoints only, so a hundred thousand runs take seconds.
//
//   console_seed --data DIR [--pending N] [--runs M]
//
// The server must be stopped: the tool takes the data directory's lock as a server does.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/server.h"
#include "store/store.h"

namespace {

int Fail(const std::string& what, const absl::Status& st) {
  std::cerr << "console_seed: " << what << ": " << st << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data;
  int64_t pending = 10000;
  int64_t runs = 100000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--data") data = argv[i + 1];
    else if (flag == "--pending") pending = std::atoll(argv[i + 1]);
    else if (flag == "--runs") runs = std::atoll(argv[i + 1]);
    else {
      std::cerr << "usage: console_seed --data DIR [--pending N] [--runs M]\n";
      return 2;
    }
  }
  if (data.empty()) {
    std::cerr << "usage: console_seed --data DIR [--pending N] [--runs M]\n";
    return 2;
  }
  auto lock = rote::orchestrator::DataDirLock::Acquire(data);
  if (!lock.ok()) return Fail("locking " + data, lock.status());
  rote::store::StoreOptions options;
  options.path = data;
  options.synchronous = rote::store::SyncMode::kNormal;
  auto store = rote::store::Store::Open(options);
  if (!store.ok()) return Fail("opening the store", store.status());
  rote::store::Store& s = **store;

  auto blueprints = s.FindBlueprintsByName("titles");
  if (!blueprints.ok() || blueprints->empty()) return Fail("finding the titles blueprint", blueprints.status());
  const std::string blueprint = blueprints->front().digest;
  auto live = s.GetRevision("titles/title_case", 1);
  if (!live.ok()) return Fail("reading titles/title_case revision 1", live.status());

  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < pending; ++i) {
    rote::store::ArtifactRecord a = *live;
    a.source = absl::StrCat("-- variant ", i, "\n", live->source);
    rote::orchestrator::engine::ArtifactCode code;
    code.source = a.source;
    auto digest = rote::orchestrator::engine::ArtifactDigest(code);
    if (!digest.ok()) return Fail("hashing a variant", digest.status());
    a.digest = *digest;
    a.provenance.author = i % 2 == 0 ? "alice" : "model";
    rote::store::AuditEntry audit;
    audit.principal = a.provenance.author;
    audit.action = "propose";
    audit.detail = absl::StrCat("seeded variant ", i);
    if (auto st = s.ProposeArtifact(a, audit); !st.ok()) return Fail("proposing a variant", st.status());
  }
  const auto proposed = std::chrono::steady_clock::now();

  auto input = s.PutBlob(R"({"names":["ada lovelace"]})");
  auto step_in = s.PutBlob(R"("ada lovelace")");
  auto step_out = s.PutBlob(R"("Ada Lovelace")");
  auto output = s.PutBlob(R"(["Ada Lovelace"])");
  if (!input.ok() || !step_in.ok() || !step_out.ok() || !output.ok()) return Fail("storing values", input.status());
  rote::store::Binding binding{"title_case", live->digest, "live"};
  for (int64_t i = 0; i < runs; ++i) {
    rote::store::NewRun run;
    run.blueprint_digest = blueprint;
    run.input_digest = input->digest;
    run.bindings = {binding};
    run.engine_profile_json = "{}";
    run.submitter = "alice";
    auto created = s.CreateRun(run);
    if (!created.ok()) return Fail("creating a run", created.status());
    const int64_t id = created->run.id;
    if (auto st = s.StartRun(id); !st.ok()) return Fail("starting a run", st.status());
    rote::store::StepRecord step{0, "title_case", live->digest, step_in->digest, step_out->digest};
    if (auto st = s.AppendSteps(id, {step}); !st.ok()) return Fail("journaling a step", st);
    rote::store::RunOutcome outcome;
    outcome.output_digest = output->digest;
    if (auto st = s.FinishRun(id, outcome); !st.ok()) return Fail("finishing a run", st.status());
  }
  const auto done = std::chrono::steady_clock::now();
  auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::cout << "{\"pending\":" << pending << ",\"runs\":" << runs << ",\"propose_s\":" << seconds(start, proposed)
            << ",\"runs_s\":" << seconds(proposed, done) << "}" << std::endl;
  return 0;
}
