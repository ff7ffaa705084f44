// The spans of a backend's calls, for benchmarks that split a window of engine steps into the
// time inside the backend and the engine's own turn between calls. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace rote::bench {

class CallTimes {
 public:
  using Clock = std::chrono::steady_clock;
  // A call that began at t0 ends now.
  void Record(Clock::time_point t0) {
    const Clock::time_point t1 = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    calls_.emplace_back(t0, t1);
  }
  // Seconds inside the calls lying wholly in [a, b], and how many there were.
  std::pair<double, int> SecondsWithin(Clock::time_point a, Clock::time_point b) {
    std::lock_guard<std::mutex> lock(mu_);
    double sum = 0.0;
    int n = 0;
    for (const auto& [s, e] : calls_)
      if (s >= a && e <= b) {
        sum += std::chrono::duration<double>(e - s).count();
        ++n;
      }
    return {sum, n};
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> calls_;
};

// The window from the step that gives every one of `batch` requests its token `warm` to the one
// that gives every one its token `warm + steps`; Callback() is each request's on_token.
class StepWindow {
 public:
  using Clock = std::chrono::steady_clock;
  StepWindow(int32_t batch, int32_t warm, int32_t steps) : batch_(batch), warm_(warm), steps_(steps) {}
  template <typename Event>
  std::function<void(const Event&)> Callback() {
    return [this](const Event& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      if (ev.index == warm_ && ++at_warm_ == batch_) begin_ = Clock::now();
      if (ev.index == warm_ + steps_ && ++at_end_ == batch_) end_ = Clock::now();
    };
  }
  Clock::time_point begin() const { return begin_; }
  Clock::time_point end() const { return end_; }

 private:
  const int32_t batch_, warm_, steps_;
  std::mutex mu_;
  int32_t at_warm_ = 0, at_end_ = 0;
  Clock::time_point begin_{}, end_{};
};

}  // namespace rote::bench
