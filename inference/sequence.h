// One request's state inside the engine: its tokens (prompt, then generated), how many positions
// have K/V in the cache and the blocks that hold them, its sampling rule, and the text streamed
// so far. The scheduler moves sequences between its queues; the engine facade feeds them tokens.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inference/engine.h"
#include "inference/grammar/grammar.h"

namespace rote::inference {

// KV blocks that hold `positions` positions.
int32_t BlocksFor(int64_t positions);

// What ends a sequence besides its own sampling parameters, and whether logits are kept.
struct AcceptRules {
  std::span<const int32_t> stop_tokens;  // sorted
  int64_t max_context = 0;
  bool capture_logits = false;
};

struct Sequence {
  RequestId id = 0;
  SamplingParams sampling;
  uint64_t sampling_key = 0;
  TokenCallback on_token;
  std::function<void(int32_t read, int32_t prompt)> on_prefill;
  std::vector<int32_t> all;  // prompt, then generated tokens
  size_t prompt_len = 0;
  int32_t computed = 0;      // positions whose K/V are in the cache
  // The block table: blocks[i] holds positions [16 i, 16 i + 16). Its first `released_blocks`
  // entries are kNoKvBlock where the model's sliding window let the scheduler release them.
  std::vector<int32_t> blocks;
  int32_t released_blocks = 0;
  std::unique_ptr<StreamDecoder> decoder;
  // The request's grammar state (GrammarConstraint); null when unconstrained. Fed every chosen
  // token; the mask of the next step is read from it.
  std::optional<grammar::Matcher> matcher;
  // The pieces its closing is planned from (grammar::ClosingPieces; empty: never closed early)
  // and, once planned, the bytes of the plan still to come (only tokens that are a prefix of
  // them are allowed).
  const std::vector<std::string>* closing_pieces = nullptr;
  std::optional<std::string> closing;
  int64_t next_closing_try = INT64_MAX;  // the budget left at which to look for a plan again
  std::string text;          // decoded output so far
  size_t emitted = 0;        // bytes of text already streamed
  GenerationResult result;
  Status error;
  bool cancel_requested = false;  // guarded by the engine's lock
  bool done = false;              // guarded by the engine's lock

  // Positions still to feed the backend (1 while decoding).
  int32_t uncomputed() const { return static_cast<int32_t>(all.size()) - computed; }

  // Appends a chosen token (and, with rules.capture_logits, the logits it came from), fills the
  // event to stream; returns why the sequence ends, if it does. A stop sequence ends the text
  // where it begins; text that could still become one is held back from the stream until it
  // cannot.
  std::optional<FinishReason> Accept(int32_t token, std::vector<float>* logits, const AcceptRules& rules,
                                     TokenEvent* ev);
};

}  // namespace rote::inference
