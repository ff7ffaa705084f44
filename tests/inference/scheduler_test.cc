// The scheduler alone, over a real block manager and no backend: which sequences it admits,
// what each step holds (decodes first, then prompt chunks within the token budget), whom it
// preempts when the KV cache is full, which prefix blocks an admitted sequence takes, and how
// long a chained greedy run may be.
#include "inference/scheduler.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <numeric>

#include "inference/backend.h"

namespace rote::inference {
namespace {

std::shared_ptr<Sequence> Seq(int32_t prompt_len, int32_t first_token = 0, int32_t max_tokens = 100) {
  auto s = std::make_shared<Sequence>();
  s->all.resize(static_cast<size_t>(prompt_len));
  std::iota(s->all.begin(), s->all.end(), first_token);
  s->prompt_len = s->all.size();
  s->sampling.max_tokens = max_tokens;
  s->sampling.temperature = 0.0f;
  return s;
}

SchedulerLimits Limits() {
  SchedulerLimits l;
  l.max_batch = 4;
  l.prefill_chunk = 16;
  l.max_step_tokens = 64;
  l.greedy_chain_steps = 8;
  l.max_context = 512;
  return l;
}

struct Fixture {
  explicit Fixture(int32_t blocks, SchedulerLimits limits = Limits()) : manager(blocks), scheduler(limits, &manager, &mu) {}
  void Add(const std::shared_ptr<Sequence>& s) {
    std::lock_guard<std::mutex> lock(mu);
    scheduler.Add(s);
  }
  // Queues `seqs` in this order, then admits what fits.
  void Admit(std::initializer_list<std::shared_ptr<Sequence>> seqs) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : seqs) scheduler.Add(s);
    scheduler.Admit();
  }
  // Runs a planned step as the engine does: every part's positions are computed, and a part
  // that reached the end of its tokens gets one more (a stand-in for the sampled token).
  void Run(const std::vector<StepPart>& parts) {
    for (const StepPart& p : parts) {
      scheduler.Advance(*p.seq, p.n);
      if (p.wants_logits) p.seq->all.push_back(7);
    }
  }
  KvBlockManager manager;
  std::mutex mu;
  Scheduler scheduler;
};

TEST(SchedulerTest, AdmitsInArrivalOrderWhileTheBatchHasRoom) {
  SchedulerLimits limits = Limits();
  limits.max_batch = 2;
  Fixture f(16, limits);
  auto a = Seq(5), b = Seq(5), c = Seq(5);
  f.Admit({a, b, c});
  EXPECT_EQ(f.scheduler.running(), (std::vector<std::shared_ptr<Sequence>>{a, b}));
  ASSERT_EQ(f.scheduler.waiting().size(), 1u);
  EXPECT_EQ(f.scheduler.waiting().front(), c);
}

TEST(SchedulerTest, AdmitsOnlyWhatFitsTheFreeBlocksUnlessNothingRuns) {
  Fixture f(2);
  auto big = Seq(40);  // 41 positions: 3 blocks, more than the cache holds
  auto next = Seq(4);
  f.Admit({big, next});
  // Nothing ran, so the first is admitted although it cannot fit; the next fits the free blocks
  // (none is taken before the step is planned).
  ASSERT_EQ(f.scheduler.running().size(), 2u);
  Fixture g(2);
  auto small = Seq(4);
  auto too_big = Seq(40);
  g.Admit({small, too_big});
  EXPECT_EQ(g.scheduler.running(), (std::vector<std::shared_ptr<Sequence>>{small}));
  EXPECT_EQ(g.scheduler.waiting().front(), too_big);
}

TEST(SchedulerTest, DecodesFirstThenPrefillChunksWithinTheBudget) {
  SchedulerLimits limits = Limits();
  limits.max_step_tokens = 20;
  Fixture f(32, limits);
  auto prefill = Seq(40);
  auto decode = Seq(3);
  f.Admit({prefill, decode});
  std::vector<StepPart> parts = f.scheduler.Schedule();
  // First step: both prefill, in admission order; the second gets what the budget leaves.
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].seq, prefill);
  EXPECT_EQ(parts[0].n, 16);  // one chunk
  EXPECT_FALSE(parts[0].wants_logits);
  EXPECT_EQ(parts[1].seq, decode);
  EXPECT_EQ(parts[1].n, 3);
  EXPECT_TRUE(parts[1].wants_logits);
  f.Run(parts);
  EXPECT_EQ(prefill->computed, 16);
  EXPECT_EQ(prefill->blocks.size(), 1u);

  // Second step: the decoding sequence first (one token), then the next chunk.
  parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].seq, decode);
  EXPECT_EQ(parts[0].n, 1);
  EXPECT_TRUE(parts[0].wants_logits);
  EXPECT_EQ(parts[1].seq, prefill);
  EXPECT_EQ(parts[1].n, 16);
  f.Run(parts);

  // Third: the prompt's last 8 tokens, and its last position wants logits.
  parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].seq, prefill);
  EXPECT_EQ(parts[1].n, 8);
  EXPECT_TRUE(parts[1].wants_logits);
}

// prefill_fills_step: the budget the chunks leave goes to the prompts in the step, in order, up
// to their ends; decoding sequences still take one token; without it a lone prompt takes a chunk.
TEST(SchedulerTest, PrefillFillsTheStepWhenAsked) {
  SchedulerLimits limits = Limits();  // chunk 16, budget 64
  {
    Fixture f(32, limits);
    auto lone = Seq(100);
    f.Admit({lone});
    std::vector<StepPart> parts = f.scheduler.Schedule();
    ASSERT_EQ(parts.size(), 1u);
    EXPECT_EQ(parts[0].n, 16) << "off: one chunk";
  }
  limits.prefill_fills_step = true;
  Fixture f(32, limits);
  auto lone = Seq(100);
  f.Admit({lone});
  std::vector<StepPart> parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].n, 64);
  EXPECT_FALSE(parts[0].wants_logits);
  f.Run(parts);
  EXPECT_EQ(lone->blocks.size(), 4u);
  parts = f.scheduler.Schedule();  // the last 36 positions, and their logits
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].n, 36);
  EXPECT_TRUE(parts[0].wants_logits);
  f.Run(parts);

  // A decoding sequence, a short prompt and a long one: the decode takes 1, the chunks 10 and 16,
  // then the short prompt is done and the long one takes what is left (37) up to a block
  // boundary: 48 positions in all.
  auto short_prompt = Seq(10, 1000);
  auto long_prompt = Seq(200, 2000);
  f.Admit({short_prompt, long_prompt});
  parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].seq, lone);
  EXPECT_EQ(parts[0].n, 1);
  EXPECT_EQ(parts[1].seq, short_prompt);
  EXPECT_EQ(parts[1].n, 10);
  EXPECT_TRUE(parts[1].wants_logits);
  EXPECT_EQ(parts[2].seq, long_prompt);
  EXPECT_EQ(parts[2].n, 48);
  EXPECT_FALSE(parts[2].wants_logits);
  EXPECT_EQ(long_prompt->blocks.size(), 3u);
}

// Filling stops at a block boundary short of the prompt's end (so the sequence can still take
// cached blocks or wait for a leader), and takes only blocks that are free: it never preempts.
TEST(SchedulerTest, PrefillFillingStopsAtBlocksAndFreeBlocks) {
  SchedulerLimits limits = Limits();  // chunk 16, budget 64
  limits.prefill_fills_step = true;
  limits.max_step_tokens = 60;
  {
    Fixture f(32, limits);
    auto a = Seq(200);
    auto b = Seq(10, 1000);
    f.Admit({a, b});
    const std::vector<StepPart> parts = f.scheduler.Schedule();
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].n, 48) << "16 + 34 left, cut to the block boundary at 48";
    EXPECT_EQ(parts[1].n, 10);
  }
  {
    Fixture f(3, limits);  // 3 blocks: 48 positions
    auto a = Seq(200);
    f.Admit({a});
    const std::vector<StepPart> parts = f.scheduler.Schedule();
    ASSERT_EQ(parts.size(), 1u);
    EXPECT_EQ(parts[0].n, 48) << "only the free blocks";
    EXPECT_EQ(f.manager.num_free(), 0);
    EXPECT_EQ(f.scheduler.running().size(), 1u) << "nobody preempted";
  }
}

TEST(SchedulerTest, AFullCachePreemptsTheLatestAdmittedEvenTheAsker) {
  Fixture f(3);
  auto a = Seq(20), b = Seq(20, 100);  // 2 blocks each; 3 in the cache; no common prefix
  f.Admit({a, b});
  ASSERT_EQ(f.scheduler.running().size(), 2u);
  std::vector<StepPart> parts = f.scheduler.Schedule();
  // a's first chunk takes 1 block, b's another; both fit.
  ASSERT_EQ(parts.size(), 2u);
  f.Run(parts);
  parts = f.scheduler.Schedule();
  // a needs its second block (the last free one); b needs one more and only itself can go.
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].seq, a);
  EXPECT_EQ(f.scheduler.running(), (std::vector<std::shared_ptr<Sequence>>{a}));
  ASSERT_EQ(f.scheduler.waiting().size(), 1u);
  EXPECT_EQ(f.scheduler.waiting().front(), b);
  EXPECT_EQ(b->computed, 0);  // recomputed from the start when readmitted
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(f.manager.num_free(), 1);
}

TEST(SchedulerTest, ReusedPositionsCountOnlyTheLastReadingOfThePrompt) {
  Fixture f(3);
  auto first = Seq(33);
  f.Admit({first});
  while (first->computed < 33) f.Run(f.scheduler.Schedule());
  f.scheduler.Remove(first);  // blocks holding tokens 0..31 stay cached
  auto other = Seq(20, 500), again = Seq(33);
  f.Admit({other, again});
  EXPECT_EQ(again->result.prompt_tokens_reused, 32);
  // other needs 2 blocks, again 1 more: 3 of 3, but again holds 2 shared ones; it goes back.
  f.Run(f.scheduler.Schedule());
  ASSERT_EQ(f.scheduler.waiting().size(), 1u);
  ASSERT_EQ(f.scheduler.waiting().front(), again);
  EXPECT_EQ(again->result.prompt_tokens_reused, 0);
  while (other->computed < 20) f.Run(f.scheduler.Schedule());
  f.scheduler.Remove(other);
  {
    std::lock_guard<std::mutex> lock(f.mu);
    f.scheduler.Admit();
  }
  // Whatever the cache still held at readmission is what counts, never more than the prompt.
  EXPECT_EQ(again->result.prompt_tokens_reused, again->computed);
  EXPECT_LE(again->result.prompt_tokens_reused, 32);
}

TEST(SchedulerTest, AnEarlierPartPreemptsALaterOne) {
  Fixture f(2);
  auto a = Seq(17), b = Seq(16);
  f.Admit({a, b});
  std::vector<StepPart> parts = f.scheduler.Schedule();  // a: 16 of 17, b: all 16
  ASSERT_EQ(parts.size(), 2u);
  f.Run(parts);
  EXPECT_EQ(f.manager.num_free(), 0);
  // Both now feed one token; a's 17th position needs a second block, so b (admitted last) goes
  // and its part leaves the step.
  parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].seq, a);
  EXPECT_EQ(parts[0].n, 1);
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(f.scheduler.waiting().front(), b);
}

TEST(SchedulerTest, AdmissionTakesCachedPrefixBlocks) {
  Fixture f(16);
  auto first = Seq(33);
  f.Admit({first});
  while (first->computed < 33) f.Run(f.scheduler.Schedule());
  const std::vector<int32_t> first_blocks = first->blocks;
  f.scheduler.Remove(first);  // finished: its blocks are free but stay cached

  auto same = Seq(33);
  f.Admit({same});
  EXPECT_EQ(same->computed, 32);
  EXPECT_EQ(same->result.prompt_tokens_reused, 32);
  EXPECT_EQ(same->blocks, std::vector<int32_t>(first_blocks.begin(), first_blocks.begin() + 2));

  // The last prompt token is always computed (its logits choose the next token): a prompt of
  // exactly two blocks shares only the first.
  auto exact = Seq(32);
  f.Admit({exact});
  EXPECT_EQ(exact->computed, 16);
  EXPECT_EQ(f.manager.RefCount(first_blocks[0]), 2);
}

TEST(SchedulerTest, SequencesAdmittedTogetherComputeTheirCommonPrefixOnce) {
  Fixture f(16);
  auto lead = Seq(40), same = Seq(40), other = Seq(40, 1000);
  same->all[38] = 99;  // the same first two blocks, another last token
  f.Admit({lead, same, other});
  // `same` waits while `lead` computes the first block (16 tokens a step here); `other` differs
  // from the first token and goes on.
  std::vector<StepPart> parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].seq, lead);
  EXPECT_EQ(parts[1].seq, other);
  f.Run(parts);
  parts = f.scheduler.Schedule();  // block 0 is cached: `same` takes it, then waits for block 1
  EXPECT_EQ(same->computed, 16);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].seq, lead);
  f.Run(parts);
  parts = f.scheduler.Schedule();
  EXPECT_EQ(same->computed, 32);
  EXPECT_EQ(same->result.prompt_tokens_reused, 32);
  EXPECT_EQ(std::vector<int32_t>(same->blocks.begin(), same->blocks.begin() + 2),
            std::vector<int32_t>(lead->blocks.begin(), lead->blocks.begin() + 2));
  // Now all three compute: `same` only its last 8 prompt tokens.
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].seq, same);
  EXPECT_EQ(parts[1].n, 8);
  EXPECT_EQ(other->result.prompt_tokens_reused, 0);
}

TEST(SchedulerTest, NoWaitingForALeaderWhenSharingIsOff) {
  SchedulerLimits limits = Limits();
  limits.prefix_sharing = false;
  Fixture f(16, limits);
  auto a = Seq(40), b = Seq(40);
  f.Admit({a, b});
  EXPECT_EQ(f.scheduler.Schedule().size(), 2u);
}

TEST(SchedulerTest, NoPrefixSharingWhenItIsOff) {
  SchedulerLimits limits = Limits();
  limits.prefix_sharing = false;
  Fixture f(16, limits);
  auto first = Seq(33);
  f.Admit({first});
  while (first->computed < 33) f.Run(f.scheduler.Schedule());
  f.scheduler.Remove(first);
  EXPECT_EQ(f.manager.cached_blocks(), 0u);
  auto same = Seq(33);
  f.Admit({same});
  EXPECT_EQ(same->computed, 0);
  EXPECT_EQ(same->result.prompt_tokens_reused, 0);
}

TEST(SchedulerTest, ChainLengthStopsShortOfEveryLimit) {
  Fixture f(16);
  auto a = Seq(4, 0, /*max_tokens=*/100), b = Seq(4, 100, /*max_tokens=*/6);
  f.Admit({a, b});
  f.Run(f.scheduler.Schedule());  // prompts computed, one token each
  a->result.tokens = {7};
  b->result.tokens = {7};
  std::vector<StepPart> parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 2u);
  // b may take 5 more tokens: the run ends at its limit rather than past it.
  EXPECT_EQ(f.scheduler.ChainLength(parts), 5);
  EXPECT_GE(static_cast<int32_t>(a->blocks.size()) * kKvBlockSize, a->computed + 5);

  // A request waiting to be admitted keeps steps single.
  auto late = Seq(4);
  f.Add(late);
  EXPECT_EQ(f.scheduler.ChainLength(parts), 1);
  {
    std::lock_guard<std::mutex> lock(f.mu);
    f.scheduler.TakeAll();
  }

  // A sampled row keeps steps single too.
  Fixture g(16);
  auto sampled = Seq(4);
  sampled->sampling.temperature = 0.7f;
  g.Admit({sampled});
  g.Run(g.scheduler.Schedule());
  parts = g.scheduler.Schedule();
  EXPECT_EQ(g.scheduler.ChainLength(parts), 1);
}

TEST(SchedulerTest, ChainLengthTakesOnlyFreeBlocks) {
  Fixture f(1);
  auto a = Seq(10);
  f.Admit({a});
  f.Run(f.scheduler.Schedule());  // 11 tokens, 10 computed, one block of 16
  std::vector<StepPart> parts = f.scheduler.Schedule();
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(f.scheduler.ChainLength(parts), 6);  // positions 10..15: what the block holds
}

TEST(SchedulerTest, CancelledSequencesAreFoundInBothQueues) {
  SchedulerLimits limits = Limits();
  limits.max_batch = 1;
  Fixture f(16, limits);
  auto running = Seq(4), waiting = Seq(4), kept = Seq(4);
  f.Admit({running, waiting, kept});
  std::lock_guard<std::mutex> lock(f.mu);
  running->cancel_requested = true;
  waiting->cancel_requested = true;
  EXPECT_EQ(f.scheduler.TakeCancelledWaiting(), (std::vector<std::shared_ptr<Sequence>>{waiting}));
  EXPECT_EQ(f.scheduler.CancelledRunning(), (std::vector<std::shared_ptr<Sequence>>{running}));
  ASSERT_EQ(f.scheduler.waiting().size(), 1u);
  EXPECT_EQ(f.scheduler.waiting().front(), kept);
  EXPECT_EQ(f.scheduler.TakeAll(), (std::vector<std::shared_ptr<Sequence>>{running, kept}));
  EXPECT_FALSE(f.scheduler.has_work());
}

// Under a window of 24 a sequence releases each block once no later query sees it: its table
// keeps kNoKvBlock there, it never holds more than MostBlocksHeld, and it runs to 300 positions
// on a cache of 8 blocks (128 positions).
TEST(SchedulerTest, AWindowReleasesWhatNoLaterQueryReads) {
  SchedulerLimits limits = Limits();
  limits.kv_window = 24;
  limits.max_step_tokens = 32;
  const int32_t most = MostBlocksHeld(limits, 300);
  EXPECT_EQ(most, BlocksFor(23 + 32) + 1);
  EXPECT_EQ(MostBlocksHeld(limits, 20), 2);  // a short sequence: all of its blocks
  SchedulerLimits no_window = limits;
  no_window.kv_window = 0;
  EXPECT_EQ(MostBlocksHeld(no_window, 300), BlocksFor(300));
  Fixture f(8, limits);
  auto s = Seq(70, 0, 1000);
  f.Admit({s});
  int steps = 0;
  while (s->computed < 300 && steps++ < 400) {
    const std::vector<StepPart> parts = f.scheduler.Schedule();
    ASSERT_EQ(parts.size(), 1u);
    // Every block a query of this step reads is held.
    const int32_t first_read = std::max(0, s->computed - 23);
    for (int32_t b = first_read / kKvBlockSize; b < BlocksFor(s->computed + parts[0].n); ++b)
      ASSERT_GE(s->blocks[static_cast<size_t>(b)], 0) << "block " << b << " at " << s->computed;
    f.Run(parts);
    const int32_t released = std::max(0, s->computed - 23) / kKvBlockSize;
    ASSERT_EQ(s->released_blocks, std::min<int32_t>(released, static_cast<int32_t>(s->blocks.size())));
    int32_t held = 0;
    for (size_t b = 0; b < s->blocks.size(); ++b) {
      if (static_cast<int32_t>(b) < s->released_blocks) {
        ASSERT_EQ(s->blocks[b], kNoKvBlock);
      } else {
        ASSERT_GE(s->blocks[b], 0);
        ++held;
      }
    }
    ASSERT_LE(held, most);
    ASSERT_EQ(f.manager.num_free(), 8 - held);
  }
  EXPECT_GE(s->computed, 300);
  f.scheduler.Remove(s);
  EXPECT_EQ(f.manager.num_free(), 8);
}

// Admission counts what a windowed sequence will hold, not its whole length.
TEST(SchedulerTest, AWindowAdmitsPromptsLongerThanTheFreeBlocks) {
  SchedulerLimits limits = Limits();
  limits.kv_window = 24;
  limits.max_step_tokens = 32;
  Fixture f(10, limits);
  auto a = Seq(10), b = Seq(200, 1000);
  f.Admit({a, b});
  EXPECT_EQ(f.scheduler.running().size(), 2u);
  limits.kv_window = 0;
  Fixture g(10, limits);
  auto c = Seq(10), d = Seq(200, 1000);
  g.Admit({c, d});
  EXPECT_EQ(g.scheduler.running().size(), 1u);
}

// A sequence readmitted after preemption shares the cached blocks of its prompt again and
// releases at once those outside the window.
TEST(SchedulerTest, AWindowReleasesSharedBlocksOutsideIt) {
  SchedulerLimits limits = Limits();
  limits.kv_window = 24;
  limits.max_step_tokens = 64;
  Fixture f(16, limits);
  auto a = Seq(100, 0, 5);
  f.Admit({a});
  while (a->uncomputed() > 1) f.Run(f.scheduler.Schedule());
  f.scheduler.Remove(a);  // its blocks stay cached
  auto b = Seq(100, 0, 5);
  f.Admit({b});
  EXPECT_EQ(b->computed, 96);  // six cached blocks shared
  EXPECT_EQ(b->released_blocks, (96 - 23) / kKvBlockSize);
  for (int32_t i = 0; i < b->released_blocks; ++i) EXPECT_EQ(b->blocks[static_cast<size_t>(i)], kNoKvBlock);
}

// A sequence that runs alone and still cannot get the blocks of its step holds the whole cache:
// preempted, it would be readmitted into the same step forever. It is left out of the step and
// reported (the engine fails it), still on the running list for the caller to remove.
TEST(SchedulerTest, ALoneSequenceLackingBlocksIsReportedNotPreemptedForever) {
  Fixture f(2);
  auto big = Seq(40);  // 41 positions: 3 blocks
  f.Admit({big});
  f.Run(f.scheduler.Schedule());  // positions 0-15
  f.Run(f.scheduler.Schedule());  // 16-31
  EXPECT_TRUE(f.scheduler.TakeUnschedulable().empty());
  const std::vector<StepPart> parts = f.scheduler.Schedule();  // 32-39 need a third block
  EXPECT_TRUE(parts.empty());
  EXPECT_EQ(f.scheduler.TakeUnschedulable(), (std::vector<std::shared_ptr<Sequence>>{big}));
  EXPECT_TRUE(f.scheduler.TakeUnschedulable().empty());
  EXPECT_EQ(f.scheduler.running(), (std::vector<std::shared_ptr<Sequence>>{big}));
  f.scheduler.Remove(big);
  EXPECT_EQ(f.manager.num_free(), 2);
  EXPECT_FALSE(f.scheduler.has_work());
}

}  // namespace
}  // namespace rote::inference
