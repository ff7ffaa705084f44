// The blueprints that ship with rote (blueprints/): their lockfiles register, their sample
// inputs give the pinned outputs, repeatedly and across a server restart, and replay matches.
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"

namespace rote::e2e {
namespace {

// The outputs are part of the contract: the same blueprint, lockfile and input give these bytes
// on every machine.
const std::map<std::string, std::string>& ExpectedOutputs() {
  static const auto* kOutputs = new std::map<std::string, std::string>{
      {"invoice_totals",
       R"({"invoice_count":6,"invoices":["INV-2024-0001","INV-2024-0002","INV-2024-0003","INV-2024-0004","INV-2024-0005","INV-2024-0006"],"mails_without_invoice":1,"totals":{"EUR":"4430.75","GBP":"600.00","USD":"1544.50"},"unpriced":["INV-2024-0006"]})"},
      {"access_log",
       R"({"bytes_per_client":{"192.0.2.200":459,"198.51.100.23":1934,"2001:db8::1":18432,"203.0.113.7":9950,"203.0.113.9":65536},"bytes_total":96311,"requests":15,"status":{"200":8,"201":1,"301":1,"304":1,"404":3,"500":1},"status_classes":{"2xx":9,"3xx":2,"4xx":3,"5xx":1},"top_paths":[{"bytes":1870,"path":"/api/orders/:id","requests":3},{"bytes":65536,"path":"/blobs/:id","requests":2},{"bytes":4652,"path":"/index.html","requests":2},{"bytes":18432,"path":"/users/:id/avatar","requests":2},{"bytes":178,"path":"/","requests":1}],"unparsed":1})"},
      {"contacts",
       R"({"contacts":[{"birthday":"1815-12-10","name":"Ada Lovelace","phone":"+14155550100","row":2},{"birthday":"1906-12-09","name":"Hopper, Grace","phone":"+12125550199","row":3},{"birthday":"2305-07-13","name":"Jean-Luc Picard","phone":"+442079460958","row":4},{"birthday":"1985-03-14","name":"O'Brien","phone":"+49301234567","row":5},{"birthday":"1978-06-19","name":"Zoë Saldaña","phone":"+33612345678","row":6},{"birthday":"1969-12-28","name":"Linus Torvalds","phone":"+358401234567","row":9}],"counts":{"ok":6,"rejected":2,"rows":8},"rejected":[{"reason":"phone: cannot normalize '12'","row":7},{"reason":"birthday: cannot parse '31.11.1867'","row":8}]})"},
  };
  return *kOutputs;
}

TEST(ShippedBlueprintsE2e, SamplesGiveTheSameBytesRepeatedlyAndAcrossARestart) {
  TestServer server;
  server.Start();
  std::map<std::string, std::string> digests;
  for (const auto& [name, expected] : ExpectedOutputs()) {
    rote::v1::Blueprint bp = server.Register(ShippedBlueprint(name), ShippedLockfile(name), name + ".lua");
    ASSERT_EQ(bp.display_name(), name);
    ASSERT_EQ(bp.bindings_size(), bp.generation_points_size()) << name << ": the lockfile binds every point";
    for (int i = 0; i < 2; ++i) {
      rote::v1::Run run = server.WaitDone(server.Submit(bp.name(), ShippedSample(name)).name());
      ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << name << ": " << run.error();
      EXPECT_EQ(run.output_json(), expected) << name;
      if (i == 0) digests[name] = run.output_digest();
      EXPECT_EQ(run.output_digest(), digests[name]) << name << ": same bytes on a repeated run";
      rote::v1::ReplayRunResponse replay;
      grpc::Status st = server.Replay(run.name(), &replay);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_TRUE(replay.matched()) << name << " " << replay.first_mismatch_step() << ": "
                                    << replay.recorded_json() << " vs " << replay.replayed_json();
      EXPECT_EQ(replay.output_digest(), run.output_digest());
      EXPECT_EQ(replay.steps_compared(), run.step_count());
    }
  }

  server.Stop();
  server.Start();
  for (const auto& [name, expected] : ExpectedOutputs()) {
    // Registering the same bytes again returns the stored blueprint; the run gives the same bytes.
    rote::v1::Blueprint bp = server.Register(ShippedBlueprint(name), ShippedLockfile(name), name + ".lua");
    rote::v1::Run run = server.WaitDone(server.Submit("blueprints/" + name, ShippedSample(name)).name());
    ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << name << ": " << run.error();
    EXPECT_EQ(run.output_digest(), digests[name]) << name << ": same bytes after a restart";
  }
}

TEST(ShippedBlueprintsE2e, LockRoundTripsTheShippedLockfiles) {
  TestServer server;
  server.Start();
  for (const auto& [name, expected] : ExpectedOutputs()) {
    rote::v1::Blueprint bp = server.Register(ShippedBlueprint(name), ShippedLockfile(name), name + ".lua");
    rote::v1::LockBlueprintRequest req;
    req.set_name(bp.name());
    rote::v1::LockBlueprintResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = server.blueprints().LockBlueprint(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.lockfile(), ShippedLockfile(name)) << name << ": `rote blueprints lock` writes the shipped file";
  }
}

}  // namespace
}  // namespace rote::e2e
