#include "inference/scheduler.h"

#include <algorithm>

#include "inference/backend.h"

namespace rote::inference {

int32_t MostBlocksHeld(const SchedulerLimits& limits, int64_t positions) {
  const int32_t all = BlocksFor(positions);
  if (limits.kv_window <= 0) return all;
  const int64_t step = std::max<int64_t>({1, limits.max_step_tokens, limits.greedy_chain_steps});
  return std::min<int32_t>(all, BlocksFor(limits.kv_window - 1 + step) + 1);
}

Scheduler::Scheduler(const SchedulerLimits& limits, KvBlockManager* blocks, std::mutex* mu)
    : limits_(limits), blocks_(blocks), mu_(mu) {}

void Scheduler::Add(std::shared_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

std::vector<std::shared_ptr<Sequence>> Scheduler::TakeCancelledWaiting() {
  std::vector<std::shared_ptr<Sequence>> cancelled;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancel_requested) {
      cancelled.push_back(*it);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  return cancelled;
}

void Scheduler::Admit() {
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < limits_.max_batch) {
    const auto& s = waiting_.front();
    if (MostBlocksHeld(limits_, static_cast<int64_t>(s->all.size()) + 1) > blocks_->num_free() && !running_.empty())
      break;
    ShareCachedPrefix(*s);
    running_.push_back(s);
    waiting_.pop_front();
  }
}

std::vector<std::shared_ptr<Sequence>> Scheduler::CancelledRunning() const {
  std::vector<std::shared_ptr<Sequence>> cancelled;
  for (const auto& s : running_) {
    if (s->cancel_requested) cancelled.push_back(s);
  }
  return cancelled;
}

std::vector<std::shared_ptr<Sequence>> Scheduler::TakeAll() {
  std::vector<std::shared_ptr<Sequence>> all = std::move(running_);
  running_.clear();
  all.insert(all.end(), waiting_.begin(), waiting_.end());
  waiting_.clear();
  return all;
}

std::vector<StepPart> Scheduler::Schedule() {
  std::vector<StepPart> parts;
  if (running_.empty()) return parts;
  int32_t budget = limits_.max_step_tokens;
  for (auto& s : running_) {
    if (s->uncomputed() > 1) ExtendSharedPrefix(*s);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < running_.size(); ++i) {
      const std::shared_ptr<Sequence>& s = running_[i];
      const int32_t remaining = s->uncomputed();
      const bool decoding = remaining == 1;
      if ((pass == 0) != decoding || budget == 0) continue;
      if (!decoding && WaitsForLeader(*s, i)) continue;
      const int32_t n = std::min({remaining, limits_.prefill_chunk, budget});
      budget -= n;
      parts.push_back({s, n, s->computed + n == static_cast<int32_t>(s->all.size())});
    }
  }
  if (limits_.prefill_fills_step) FillStep(parts, budget);
  AllocateBlocks(parts);
  return parts;
}

void Scheduler::FillStep(std::vector<StepPart>& parts, int32_t budget) {
  // Only into blocks that are free now: filling is opportunistic and must never preempt anyone.
  int64_t free = blocks_->num_free();
  for (const StepPart& p : parts)
    free -= std::max<int64_t>(0, BlocksFor(p.seq->computed + p.n) - static_cast<int64_t>(p.seq->blocks.size()));
  for (StepPart& p : parts) {
    if (budget == 0 || free <= 0) break;
    const Sequence& s = *p.seq;
    const int32_t remaining = s.uncomputed();
    if (remaining <= p.n) continue;  // decoding, or its prompt ends in this step already
    const int32_t held = std::max<int32_t>(static_cast<int32_t>(s.blocks.size()), BlocksFor(s.computed + p.n));
    int64_t end = std::min<int64_t>({static_cast<int64_t>(s.computed) + remaining, static_cast<int64_t>(s.computed) + p.n + budget,
                                     (held + free) * kKvBlockSize});
    // Short of the prompt's end, stop at a block boundary: a sequence between boundaries can
    // neither take cached blocks nor wait for a leader (ExtendSharedPrefix, WaitsForLeader).
    if (end < static_cast<int64_t>(s.computed) + remaining) end = end / kKvBlockSize * kKvBlockSize;
    const int32_t more = static_cast<int32_t>(std::max<int64_t>(0, end - s.computed - p.n));
    if (more == 0) continue;
    free -= std::max<int32_t>(0, BlocksFor(s.computed + p.n + more) - held);
    p.n += more;
    budget -= more;
    p.wants_logits = s.computed + p.n == static_cast<int32_t>(s.all.size());
  }
}

void Scheduler::AllocateBlocks(std::vector<StepPart>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    Sequence& s = *parts[i].seq;
    bool dropped_self = false;
    while (BlocksFor(s.computed + parts[i].n) > static_cast<int32_t>(s.blocks.size())) {
      std::optional<int32_t> b = blocks_->Allocate();
      if (b.has_value()) {
        s.blocks.push_back(*b);
        continue;
      }
      std::shared_ptr<Sequence> victim = running_.back();
      auto pit = std::find_if(parts.begin(), parts.end(), [&](const StepPart& p) { return p.seq == victim; });
      const size_t victim_index = static_cast<size_t>(pit - parts.begin());
      if (pit != parts.end()) parts.erase(pit);
      if (victim.get() == &s && running_.size() == 1) {
        // Alone, it holds every block there is and still lacks some: preempted, it would be
        // readmitted into the same step forever. The engine fails it instead.
        unschedulable_.push_back(victim);
        dropped_self = true;
        break;
      }
      Preempt(victim);
      if (victim.get() == &s) {
        dropped_self = true;
        break;
      }
      if (victim_index < i) --i;  // the victim's part came earlier in the plan
    }
    if (dropped_self) --i;
  }
}

int32_t Scheduler::ChainLength(const std::vector<StepPart>& parts) {
  if (limits_.greedy_chain_steps <= 1 || limits_.capture_logits) return 1;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (!waiting_.empty()) return 1;  // an arrival is admitted at the next step, as without chaining
  }
  int64_t run = limits_.greedy_chain_steps;
  for (const StepPart& p : parts) {
    const Sequence& s = *p.seq;
    if (p.n != 1 || !p.wants_logits || s.sampling.temperature > 0.0f) return 1;
    // No request may reach its length limit before the run's last step (a stop token or sequence
    // may: the tokens past it are dropped).
    run = std::min<int64_t>(run, static_cast<int64_t>(s.sampling.max_tokens) - static_cast<int64_t>(s.result.tokens.size()));
    run = std::min<int64_t>(run, limits_.max_context - static_cast<int64_t>(s.all.size()));
  }
  for (const StepPart& p : parts) {
    Sequence& s = *p.seq;
    while (run > 1 && BlocksFor(s.computed + run) > static_cast<int32_t>(s.blocks.size())) {
      std::optional<int32_t> b = blocks_->Allocate();
      if (!b.has_value()) {
        run = std::min<int64_t>(run, static_cast<int64_t>(s.blocks.size()) * kKvBlockSize - s.computed);
        break;
      }
      s.blocks.push_back(*b);
    }
  }
  return static_cast<int32_t>(std::max<int64_t>(run, 1));
}

void Scheduler::Advance(Sequence& s, int32_t n) {
  const int32_t before = s.computed;
  s.computed += n;
  if (limits_.prefix_sharing) {
    for (int32_t b = before / kKvBlockSize; b < s.computed / kKvBlockSize; ++b) {
      blocks_->RegisterFullBlock(s.all, s.blocks, static_cast<size_t>(b));
    }
  }
  ReleaseOutsideWindow(s);
}

void Scheduler::ReleaseOutsideWindow(Sequence& s) {
  if (limits_.kv_window <= 0) return;
  // The next query is at position s.computed; it and every later one see keys from
  // s.computed - kv_window + 1 on (ModelConfig::first_read_key), so whole blocks before that
  // are never read again. Oldest first: the prefix cache then evicts the oldest first as well.
  const int64_t first_read = static_cast<int64_t>(s.computed) - limits_.kv_window + 1;
  const int64_t end = std::min<int64_t>(first_read > 0 ? first_read / kKvBlockSize : 0, static_cast<int64_t>(s.blocks.size()));
  for (; s.released_blocks < end; ++s.released_blocks) {
    int32_t& b = s.blocks[static_cast<size_t>(s.released_blocks)];
    blocks_->Release(b);
    b = kNoKvBlock;
  }
}

std::vector<std::shared_ptr<Sequence>> Scheduler::TakeUnschedulable() {
  std::vector<std::shared_ptr<Sequence>> out = std::move(unschedulable_);
  unschedulable_.clear();
  return out;
}

void Scheduler::Remove(const std::shared_ptr<Sequence>& s) {
  ReleaseBlocks(*s);
  running_.erase(std::find(running_.begin(), running_.end(), s));
}

void Scheduler::Preempt(const std::shared_ptr<Sequence>& s) {
  // Readmitted, it reads its prompt again: what it reuses then is counted afresh.
  s->result.prompt_tokens_reused = 0;
  Remove(s);
  std::lock_guard<std::mutex> lock(*mu_);
  waiting_.push_front(s);
}

void Scheduler::ReleaseBlocks(Sequence& s) {
  // Last block first: the prefix cache evicts its least recently released block first, so a
  // sequence's deepest blocks go before the ones they hang from (KvBlockManager::Release).
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b)
    if (*b != kNoKvBlock) blocks_->Release(*b);
  s.blocks.clear();
  s.released_blocks = 0;
  s.computed = 0;
}

void Scheduler::ExtendSharedPrefix(Sequence& s) {
  // Only at a block boundary: a partly computed block of its own cannot be swapped for a cached one.
  if (!limits_.prefix_sharing || s.computed != static_cast<int32_t>(s.blocks.size()) * kKvBlockSize) return;
  const size_t shareable = (s.all.size() - 1) / kKvBlockSize;
  const size_t before = s.blocks.size();
  if (before >= shareable) return;
  blocks_->ShareCachedPrefix(s.all, shareable, &s.blocks);
  const int32_t gained = static_cast<int32_t>(s.blocks.size() - before) * kKvBlockSize;
  s.computed += gained;
  s.result.prompt_tokens_reused =
      std::min<int32_t>(static_cast<int32_t>(s.prompt_len), s.result.prompt_tokens_reused + gained);
  ReleaseOutsideWindow(s);
}

bool Scheduler::WaitsForLeader(const Sequence& s, size_t index) const {
  if (!limits_.prefix_sharing || s.computed != static_cast<int32_t>(s.blocks.size()) * kKvBlockSize) return false;
  const size_t b = s.blocks.size();  // the next block s would compute
  if (b >= (s.all.size() - 1) / kKvBlockSize) return false;  // not a block it could share
  if (b > 0 && s.blocks[b - 1] == kNoKvBlock) return false;  // released: it names no prefix
  const size_t end = (b + 1) * kKvBlockSize;
  for (size_t j = 0; j < index; ++j) {
    const Sequence& l = *running_[j];
    // A leader is prefilling, has not computed block b yet but will (its prompt runs past it),
    // and holds the same blocks before it and the same tokens in it.
    if (l.uncomputed() <= 1 || static_cast<size_t>(l.computed) >= end || l.all.size() <= end) continue;
    if (l.blocks.size() < b || !std::equal(s.blocks.begin(), s.blocks.end(), l.blocks.begin())) continue;
    if (std::equal(s.all.begin() + static_cast<std::ptrdiff_t>(end - kKvBlockSize),
                   s.all.begin() + static_cast<std::ptrdiff_t>(end), l.all.begin() + static_cast<std::ptrdiff_t>(end - kKvBlockSize)))
      return true;
  }
  return false;
}

void Scheduler::ShareCachedPrefix(Sequence& s) {
  if (!limits_.prefix_sharing || s.computed != 0 || !s.blocks.empty()) return;
  // At least the last token is always computed: its logits choose the next token.
  const size_t shareable = (s.all.size() - 1) / kKvBlockSize;
  blocks_->ShareCachedPrefix(s.all, shareable, &s.blocks);
  s.computed = static_cast<int32_t>(s.blocks.size()) * kKvBlockSize;
  // Prompt positions only: a preempted sequence readmitted may also find its generated tokens.
  s.result.prompt_tokens_reused = std::min<int32_t>(static_cast<int32_t>(s.prompt_len), s.computed);
  ReleaseOutsideWindow(s);
}

}  // namespace rote::inference
