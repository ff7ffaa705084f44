// The scheduler: which sequences run in the next step and how many tokens each feeds. Sequences
// wait in arrival order, are admitted while the batch has room and their tokens fit the free
// blocks (taking any cached prefix blocks on the way in), and each step decodes every running
// sequence first, then gives the rest of the step's token budget to prompt chunks. When the KV
// cache is full, the most recently admitted sequence is preempted: its blocks are released and it
// waits at the head of the queue to be recomputed. Under a model whose every layer has a sliding
// window, a sequence gives back each block as soon as no later query can see it. Recomputation gives the same K/V bits (batch
// invariance), so a preempted sequence resumes exactly where it was.
//
// Threads: the waiting queue and the sequences' cancel/done flags are guarded by the engine's
// lock (`mu`); the running list and the blocks belong to the scheduler thread. Each method says
// which it expects.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "inference/kv_block_manager.h"
#include "inference/sequence.h"

namespace rote::inference {

struct SchedulerLimits {
  int32_t max_batch = 16;          // sequences in one step
  int32_t prefill_chunk = 256;     // prompt tokens one sequence feeds per step
  int32_t max_step_tokens = 512;   // tokens in one step (decodes first, then prefill)
  bool prefill_fills_step = false; // EngineOptions::prefill_fills_step (on there by default)
  int32_t greedy_chain_steps = 8;  // EngineOptions::greedy_chain_steps
  bool capture_logits = false;     // chained steps keep no logits, so capturing forbids them
  bool prefix_sharing = true;
  int64_t max_context = 0;         // positions per sequence
  // ModelConfig::kv_window() where the engine releases what no later query reads (0: never):
  // after each step a sequence's blocks wholly before position computed - kv_window + 1 go
  // back to the cache and its table says kNoKvBlock there.
  int32_t kv_window = 0;
};

// The most KV blocks a sequence of `positions` positions holds at once: all of them, or under a
// window only the window's positions before a step's first new one and the step's new ones (up
// to max_step_tokens, or a chained run's greedy_chain_steps), across at most one more block
// boundary than they fill.
int32_t MostBlocksHeld(const SchedulerLimits& limits, int64_t positions);

// One sequence's share of a step: n new tokens, and whether its last one's logits are wanted.
struct StepPart {
  std::shared_ptr<Sequence> seq;
  int32_t n = 0;
  bool wants_logits = false;
};

class Scheduler {
 public:
  Scheduler(const SchedulerLimits& limits, KvBlockManager* blocks, std::mutex* mu);

  // --- Caller holds *mu.
  void Add(std::shared_ptr<Sequence> seq);  // at the back of the waiting queue
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Takes the waiting sequences whose cancellation was requested out of the queue, in its order.
  std::vector<std::shared_ptr<Sequence>> TakeCancelledWaiting();
  // Moves sequences from the head of the waiting queue to the running list while the batch has
  // room. One is admitted only when its current tokens fit in the free blocks (or nothing runs),
  // so a new arrival does not immediately force a preemption.
  void Admit();
  // The running sequences whose cancellation was requested, in admission order.
  std::vector<std::shared_ptr<Sequence>> CancelledRunning() const;
  // Empties both queues (shutdown): the running sequences, then the waiting ones.
  std::vector<std::shared_ptr<Sequence>> TakeAll();

  // --- Scheduler thread, *mu not held.
  // The next step: every decoding sequence takes one token, then prefilling sequences take
  // chunks while the step's token budget lasts; each part's positions get blocks, preempting
  // the most recently admitted sequence (possibly the one asking) while the cache is full.
  // Empty when nothing runs.
  std::vector<StepPart> Schedule();
  // How many greedy steps the step planned as `parts` runs in one backend call (1: just itself;
  // EngineOptions::greedy_chain_steps), the blocks for all of them taken (only where free: a
  // chained run never preempts). Takes *mu to look at the waiting queue.
  int32_t ChainLength(const std::vector<StepPart>& parts);
  // `n` more positions of `s` are in the cache; full blocks among them join the prefix cache.
  void Advance(Sequence& s, int32_t n);
  // Takes a finished (or failed, or cancelled) sequence off the running list, releasing its blocks.
  void Remove(const std::shared_ptr<Sequence>& s);
  // The running sequences the last Schedule left out because their step's positions need more
  // blocks than the whole cache while they run alone (the engine refuses such requests up front,
  // so this names a broken bound, not a full cache); still on the running list, for the caller to
  // fail (Remove).
  std::vector<std::shared_ptr<Sequence>> TakeUnschedulable();

  const SchedulerLimits& limits() const { return limits_; }
  const std::vector<std::shared_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::shared_ptr<Sequence>>& waiting() const { return waiting_; }  // *mu held

 private:
  void Preempt(const std::shared_ptr<Sequence>& s);
  void ReleaseBlocks(Sequence& s);
  // Under a window (limits_.kv_window): releases the blocks that no query at s.computed or later
  // reads, oldest first, leaving kNoKvBlock in their entries.
  void ReleaseOutsideWindow(Sequence& s);
  void ShareCachedPrefix(Sequence& s);
  // A prefilling sequence at a block boundary takes the cached blocks that continue its prompt,
  // computed since it was admitted by a sequence with the same prefix.
  void ExtendSharedPrefix(Sequence& s);
  // Whether an earlier running sequence is about to compute the next block of `s`'s prompt (same
  // blocks before it, same tokens in it): `s` then sits this step out and takes that block from
  // the cache once it is there, instead of computing the same prefix a second time (requests
  // submitted together, like the points of a run, share their system prompt this way).
  bool WaitsForLeader(const Sequence& s, size_t index) const;
  // prefill_fills_step: the `budget` the chunks left goes to the prompts in `parts`, in order, up to
  // their ends, into free blocks only, stopping at a block boundary short of a prompt's end.
  void FillStep(std::vector<StepPart>& parts, int32_t budget);
  // Gives every part blocks for its positions, preempting while the cache is full.
  void AllocateBlocks(std::vector<StepPart>& parts);

  const SchedulerLimits limits_;
  KvBlockManager* const blocks_;
  std::mutex* const mu_;
  std::deque<std::shared_ptr<Sequence>> waiting_;   // guarded by *mu_
  std::vector<std::shared_ptr<Sequence>> running_;  // scheduler thread only, admission order
  std::vector<std::shared_ptr<Sequence>> unschedulable_;  // scheduler thread only (TakeUnschedulable)
};

}  // namespace rote::inference
