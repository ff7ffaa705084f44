// Engine: runs queued in the database, for several replicas on one store (docs/operations.md,
// "Several replicas on PostgreSQL"). A claimer takes as many runs as this replica has free
// workers (Store::ClaimRuns), a heartbeat renews their leases, and a run whose lease this
// replica lost is stopped without recording anything more (the store fences its writes too).
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/engine_internal.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator::engine {

std::string DefaultReplicaId() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "rote");
  return absl::StrCat(host, "-", ::getpid());
}

void Engine::ClaimLoop() {
  const store::NewRunEvent takeover = EventBus::Stored(
      {RunEvent::Log(absl::StrCat("taken over by replica ", replica_id_,
                                  ": the replica executing it stopped renewing its lease; the run runs again from "
                                  "its start")),
       RunEvent::State(store::RunState::kPending)});
  int failures = 0;
  while (true) {
    int free = 0;
    {
      std::unique_lock lock(mu_);
      claim_cv_.wait_for(lock, options_.claim_poll, [&] { return stopping_ || draining_ || claim_poke_; });
      if (stopping_ || draining_) return;
      claim_poke_ = false;
      free = options_.run_workers - static_cast<int>(executing_.size() + queue_.size());
    }
    if (free <= 0) continue;
    store::ClaimRequest request{replica_id_, free, options_.lease.count(), takeover.kind, takeover.payload};
    absl::StatusOr<std::vector<store::ClaimedRun>> claimed = store_->ClaimRuns(request);
    if (!claimed.ok()) {
      // The database may be away for a while; the leases of others expire meanwhile as ours do.
      if (failures++ % 50 == 0) spdlog::warn("claiming runs failed: {}", std::string(claimed.status().message()));
      continue;
    }
    failures = 0;
    for (const store::ClaimedRun& c : *claimed) TakeUp(c);
    if (static_cast<int>(claimed->size()) == free) {
      std::lock_guard lock(mu_);
      claim_poke_ = true;  // there may be more
    }
  }
}

void Engine::TakeUp(const store::ClaimedRun& c) {
  const int64_t id = c.run.id;
  {
    std::lock_guard lock(mu_);
    ++claimed_;
    if (c.taken_over) ++taken_over_;
  }
  events_.Notify();
  if (c.taken_over) {
    spdlog::info("run {}: taken over from replica {} (its lease expired); running it from its start", id,
                 c.previous_owner.empty() ? "(unknown)" : c.previous_owner);
  }
  absl::StatusOr<std::shared_ptr<RunControl>> control = ControlFor(c.run);
  if (!control.ok()) {
    spdlog::error("run {}: cannot take it up ({}); giving it back", id, std::string(control.status().message()));
    events_.Requeue(id, absl::StrCat("given back by replica ", replica_id_, ": ", control.status().message()))
        .IgnoreError();
    return;
  }
  if (*control == nullptr) return;  // failed: it cannot run anywhere
  (*control)->claimed = c.run;
  bool give_back = false;
  {
    std::lock_guard lock(mu_);
    give_back = stopping_ || draining_;
  }
  if (give_back) {
    events_.Requeue(id, absl::StrCat("re-queued by replica ", replica_id_, ", which is stopping")).IgnoreError();
    return;
  }
  Enqueue(id, *std::move(control));
}

void Engine::GiveBackQueued(std::string_view why) {
  std::deque<Job> queued;
  {
    std::lock_guard lock(mu_);
    queued.swap(queue_);
    for (const Job& job : queued) active_.erase(job.run_id);
  }
  for (const Job& job : queued) {
    {
      std::lock_guard lock(job.control->mu);
      if (job.control->cancelled) continue;
    }
    absl::Status s = events_.Requeue(job.run_id, why);
    if (!s.ok()) spdlog::warn("run {}: cannot give it back: {}", job.run_id, std::string(s.message()));
  }
  finished_cv_.notify_all();
}

void Engine::HeartbeatLoop() {
  int failures = 0;
  while (true) {
    {
      std::unique_lock lock(mu_);
      claim_cv_.wait_for(lock, options_.heartbeat, [&] { return heartbeat_stop_; });
      if (heartbeat_stop_) return;
    }
    absl::StatusOr<std::vector<int64_t>> lost = store_->RenewRunLeases(options_.lease.count());
    if (!lost.ok()) {
      if (failures++ % 10 == 0) spdlog::warn("renewing run leases failed: {}", std::string(lost.status().message()));
      continue;
    }
    failures = 0;
    for (int64_t id : *lost) {
      std::shared_ptr<RunControl> control;
      {
        std::lock_guard lock(mu_);
        ++leases_lost_;
        auto it = active_.find(id);
        if (it != active_.end()) control = it->second;
      }
      spdlog::warn("run {}: replica {} lost its lease (taken over by another replica, or ended elsewhere)", id,
                   replica_id_);
      if (control == nullptr) continue;
      {
        std::lock_guard lock(control->mu);
        control->lease_lost = true;
      }
      control->interrupt.Interrupt(absl::AbortedError(
          absl::StrCat("replica ", replica_id_, " lost the lease of ", RunName(id))));
    }
  }
}

}  // namespace rote::orchestrator::engine
