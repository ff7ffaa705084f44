#include "orchestrator/api/operator_metrics.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace rote::orchestrator {

std::string LabelCap::operator()(const std::string& value) {
  std::lock_guard lock(mu_);
  if (kept_.count(value) != 0) return value;
  if (kept_.size() < max_values_) {
    kept_.insert(value);
    return value;
  }
  return "other";
}

struct OperatorMetrics::Families {
  prometheus::Family<prometheus::Counter>* runs_finished;
  prometheus::Family<prometheus::Histogram>* run_duration;
  prometheus::Family<prometheus::Counter>* attempts;
  prometheus::Family<prometheus::Counter>* tokens;
  prometheus::Family<prometheus::Counter>* model_seconds;
  prometheus::Family<prometheus::Counter>* cache_hits;
};

namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

prometheus::ClientMetric Value(prometheus::MetricType type, double value,
                               std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

// One metric family with one unlabelled value.
prometheus::MetricFamily Single(const char* name, const char* help, prometheus::MetricType type, double value) {
  prometheus::MetricFamily f = Family(name, help, type);
  f.metric.push_back(Value(type, value));
  return f;
}

constexpr auto kGauge = prometheus::MetricType::Gauge;
constexpr auto kCounter = prometheus::MetricType::Counter;

// Runs queued in the database that several replicas share (docs/operations.md, "Several
// replicas on PostgreSQL").
void AddSharedQueue(const engine::Engine::QueueStats& runs, std::vector<prometheus::MetricFamily>* out) {
  out->push_back(Single("rote_runs_claimed_total", "Runs this replica claimed from the shared queue, since it started",
                        kCounter, static_cast<double>(runs.claimed)));
  out->push_back(Single("rote_run_lease_takeovers_total",
                        "Runs this replica took over from a replica whose lease expired, since it started", kCounter,
                        static_cast<double>(runs.taken_over)));
  out->push_back(Single("rote_run_leases_lost_total",
                        "Leases this replica lost (its run taken over or ended elsewhere), since it started", kCounter,
                        static_cast<double>(runs.leases_lost)));
  if (runs.store_pending < 0) return;  // the database did not answer this scrape
  prometheus::MetricFamily f =
      Family("rote_store_runs", "Runs in the shared database by state, over every replica", kGauge);
  f.metric.push_back(Value(kGauge, static_cast<double>(runs.store_pending), {{"state", "pending"}}));
  f.metric.push_back(Value(kGauge, static_cast<double>(runs.store_running), {{"state", "running"}}));
  out->push_back(std::move(f));
}

}  // namespace

class OperatorMetrics::Snapshot : public prometheus::Collectable {
 public:
  explicit Snapshot(LabelCap* blueprints) : blueprints_(blueprints) {}

  void Set(MetricSources sources) {
    std::lock_guard lock(mu_);
    sources_ = std::move(sources);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    // Held while the sources are read, so SetSources({}) returns only once no scrape uses them.
    std::lock_guard lock(mu_);
    const MetricSources& s = sources_;
    std::vector<prometheus::MetricFamily> out;
    if (s.runs) {
      const engine::Engine::QueueStats runs = s.runs();
      prometheus::MetricFamily f =
          Family("rote_runs", "Runs this server holds, by blueprint and state (pending: queued here; running)", kGauge);
      std::map<std::pair<std::string, std::string>, double> values;
      for (const auto& [name, counts] : runs.by_blueprint) {
        const std::string label = (*blueprints_)(name);
        values[{label, "pending"}] += static_cast<double>(counts.first);
        values[{label, "running"}] += static_cast<double>(counts.second);
      }
      for (const auto& [key, value] : values) {
        f.metric.push_back(Value(kGauge, value, {{"blueprint", key.first}, {"state", key.second}}));
      }
      out.push_back(std::move(f));
      out.push_back(Single("rote_run_queue_depth", "Runs queued in this server, waiting for a worker", kGauge,
                           static_cast<double>(runs.queued)));
      out.push_back(Single("rote_runs_executing", "Runs a worker of this server executes now", kGauge,
                           static_cast<double>(runs.executing)));
      out.push_back(Single("rote_runs_requeued_total",
                           "Runs this server put back in the queue while draining, since it started", kCounter,
                           static_cast<double>(runs.requeued_by_drain)));
      if (runs.shared_queue) AddSharedQueue(runs, &out);
    }
    if (s.workers) {
      const sandbox::WorkerPoolStats w = s.workers();
      out.push_back(Single("rote_sandbox_calls_total", "Batches of artifact calls sent to sandbox workers", kCounter,
                           static_cast<double>(w.calls)));
      prometheus::MetricFamily restarts = Family(
          "rote_sandbox_worker_restarts_total", "Sandbox workers replaced after they died, by cause", kCounter);
      restarts.metric.push_back(Value(kCounter, static_cast<double>(w.crashes), {{"cause", "crash"}}));
      restarts.metric.push_back(Value(kCounter, static_cast<double>(w.timeouts), {{"cause", "timeout"}}));
      out.push_back(std::move(restarts));
      prometheus::MetricFamily limits =
          Family("rote_sandbox_limit_hits_total", "Artifact calls stopped by a sandbox limit, by limit", kCounter);
      limits.metric.push_back(Value(kCounter, static_cast<double>(w.instruction_limit_hits), {{"limit", "instructions"}}));
      limits.metric.push_back(Value(kCounter, static_cast<double>(w.memory_limit_hits), {{"limit", "memory"}}));
      limits.metric.push_back(Value(kCounter, static_cast<double>(w.output_limit_hits), {{"limit", "output"}}));
      limits.metric.push_back(Value(kCounter, static_cast<double>(w.timeouts), {{"limit", "deadline"}}));
      out.push_back(std::move(limits));
    }
    if (s.model) {
      const inference::EngineStats e = s.model();
      prometheus::MetricFamily tokens =
          Family("rote_engine_tokens_total", "Tokens the inference engine computed, by phase", kCounter);
      tokens.metric.push_back(Value(kCounter, static_cast<double>(e.prefill_tokens), {{"phase", "prefill"}}));
      tokens.metric.push_back(Value(kCounter, static_cast<double>(e.generated_tokens), {{"phase", "decode"}}));
      out.push_back(std::move(tokens));
      prometheus::MetricFamily seconds = Family(
          "rote_engine_step_seconds_total",
          "Time the inference engine spent computing steps, by phase (a step with any prompt position is prefill)",
          kCounter);
      seconds.metric.push_back(Value(kCounter, e.prefill_seconds, {{"phase", "prefill"}}));
      seconds.metric.push_back(Value(kCounter, e.decode_seconds, {{"phase", "decode"}}));
      out.push_back(std::move(seconds));
      out.push_back(Single("rote_engine_steps_total", "Batches the inference engine computed", kCounter,
                           static_cast<double>(e.steps)));
      prometheus::MetricFamily batch = Family(
          "rote_engine_batch_size", "Sequences per batch the inference engine computed", prometheus::MetricType::Histogram);
      prometheus::ClientMetric h;
      uint64_t cumulative = 0;
      size_t next = 1;
      for (double bound : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0}) {
        for (; next < e.batch_size_steps.size() && static_cast<double>(next) <= bound; ++next) {
          cumulative += static_cast<uint64_t>(e.batch_size_steps[next]);
        }
        h.histogram.bucket.push_back({cumulative, bound});
      }
      h.histogram.sample_count = static_cast<uint64_t>(e.steps);
      h.histogram.sample_sum = static_cast<double>(e.batch_size_sum);
      h.histogram.bucket.push_back({h.histogram.sample_count, std::numeric_limits<double>::infinity()});
      batch.metric.push_back(std::move(h));
      out.push_back(std::move(batch));
      out.push_back(Single("rote_engine_kv_blocks_in_use", "KV cache blocks held by sequences", kGauge,
                           static_cast<double>(e.kv_blocks_in_use)));
      out.push_back(Single("rote_engine_kv_blocks", "KV cache blocks in all", kGauge,
                           static_cast<double>(s.kv_blocks_total)));
      out.push_back(Single("rote_engine_waiting_requests", "Generation requests waiting to join the batch", kGauge,
                           static_cast<double>(e.waiting)));
      out.push_back(Single("rote_engine_running_requests", "Generation requests in the running batch", kGauge,
                           static_cast<double>(e.running)));
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  MetricSources sources_;
  LabelCap* blueprints_;
};

OperatorMetrics::OperatorMetrics(prometheus::Registry& registry)
    : families_(std::make_unique<Families>()), snapshot_(std::make_shared<Snapshot>(&blueprints_)) {
  families_->runs_finished = &prometheus::BuildCounter()
                                  .Name("rote_runs_finished_total")
                                  .Help("Runs that reached a terminal state, by blueprint and state")
                                  .Register(registry);
  families_->run_duration = &prometheus::BuildHistogram()
                                 .Name("rote_run_duration_seconds")
                                 .Help("Time from a run's start to its end, by blueprint and terminal state")
                                 .Register(registry);
  families_->attempts = &prometheus::BuildCounter()
                             .Name("rote_generation_attempts_total")
                             .Help("Generation attempts, by outcome (passed, failed) and failure reason")
                             .Register(registry);
  families_->tokens = &prometheus::BuildCounter()
                           .Name("rote_generation_tokens_total")
                           .Help("Tokens of generation attempts, by direction (in: prompt, out: generated)")
                           .Register(registry);
  families_->model_seconds = &prometheus::BuildCounter()
                                  .Name("rote_generation_model_seconds_total")
                                  .Help("Time generation attempts spent in the model")
                                  .Register(registry);
  families_->cache_hits = &prometheus::BuildCounter()
                               .Name("rote_generation_cache_hits_total")
                               .Help("Generation requests answered without the model, by what answered them")
                               .Register(registry);
  // Present (at 0) before the first event, so dashboards and alerts see every family.
  families_->model_seconds->Add({});
  for (const char* direction : {"in", "out"}) families_->tokens->Add({{"direction", direction}});
  for (const char* kind : {"artifact", "failure"}) families_->cache_hits->Add({{"kind", kind}});
  families_->attempts->Add({{"outcome", "passed"}, {"reason", ""}});
  for (const char* reason : kGenerationFailureReasons) families_->attempts->Add({{"outcome", "failed"}, {"reason", reason}});
}

OperatorMetrics::~OperatorMetrics() = default;

void OperatorMetrics::SetSources(MetricSources sources) { snapshot_->Set(std::move(sources)); }

std::shared_ptr<prometheus::Collectable> OperatorMetrics::Collectable() { return snapshot_; }

void OperatorMetrics::RunEnded(const std::string& blueprint, store::RunState state, double seconds) {
  const std::string label = blueprints_(blueprint);
  const std::string state_name(store::RunStateName(state));
  families_->runs_finished->Add({{"blueprint", label}, {"state", state_name}}).Increment();
  if (seconds < 0) return;
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30,
                                                                   60, 300, 900, 1800, 3600};
  families_->run_duration->Add({{"blueprint", label}, {"state", state_name}}, kBuckets).Observe(seconds);
}

void OperatorMetrics::GenerationAttempt(bool passed, const std::string& reason, int64_t prompt_tokens,
                                        int64_t output_tokens, double seconds) {
  std::string bounded = "other";
  for (const char* known : kGenerationFailureReasons) {
    if (reason == known) bounded = reason;
  }
  families_->attempts->Add({{"outcome", passed ? "passed" : "failed"}, {"reason", passed ? "" : bounded}}).Increment();
  families_->tokens->Add({{"direction", "in"}}).Increment(static_cast<double>(std::max<int64_t>(prompt_tokens, 0)));
  families_->tokens->Add({{"direction", "out"}}).Increment(static_cast<double>(std::max<int64_t>(output_tokens, 0)));
  if (seconds > 0) families_->model_seconds->Add({}).Increment(seconds);
}

void OperatorMetrics::GenerationCacheHit(const std::string& kind) {
  families_->cache_hits->Add({{"kind", kind == "artifact" ? "artifact" : "failure"}}).Increment();
}

}  // namespace rote::orchestrator
