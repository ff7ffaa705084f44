#include "inference/sequence.h"

#include <algorithm>

#include "inference/backend.h"

namespace rote::inference {

int32_t BlocksFor(int64_t positions) { return static_cast<int32_t>((positions + kKvBlockSize - 1) / kKvBlockSize); }

namespace {

// The length of the longest tail of `text` that is a proper prefix of a stop sequence: bytes
// that must wait for the next token before they can be streamed.
size_t HeldBack(const std::string& text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& st : stops) {
    for (size_t k = std::min(st.size() - 1, text.size()); k > held; --k) {
      if (text.compare(text.size() - k, k, st, 0, k) == 0) {
        held = k;
        break;
      }
    }
  }
  return held;
}

}  // namespace

std::optional<FinishReason> Sequence::Accept(int32_t token, std::vector<float>* logits, const AcceptRules& rules,
                                             TokenEvent* ev) {
  all.push_back(token);
  result.tokens.push_back(token);
  if (rules.capture_logits) result.step_logits.push_back(std::move(*logits));
  ev->token = token;
  ev->index = static_cast<int32_t>(result.tokens.size()) - 1;
  std::optional<FinishReason> finish;
  const bool is_stop_token =
      !sampling.ignore_eos && std::binary_search(rules.stop_tokens.begin(), rules.stop_tokens.end(), token);
  if (is_stop_token) {
    finish = FinishReason::kEndOfSequence;
  } else {
    text += decoder->Push(token);
    size_t longest_stop = 0;
    for (const std::string& st : sampling.stop) longest_stop = std::max(longest_stop, st.size());
    const size_t from = emitted > longest_stop ? emitted - longest_stop : 0;
    size_t cut = std::string::npos;
    for (const std::string& st : sampling.stop) cut = std::min(cut, text.find(st, from));
    if (cut != std::string::npos) {
      text.resize(cut);
      finish = FinishReason::kStopSequence;
    }
  }
  if (!finish.has_value()) {
    if (static_cast<int32_t>(result.tokens.size()) >= sampling.max_tokens ||
        static_cast<int64_t>(all.size()) >= rules.max_context) {
      finish = FinishReason::kLength;
    }
  }
  if (finish.has_value() && *finish != FinishReason::kStopSequence) text += decoder->Finish();
  const size_t safe = finish.has_value() ? text.size() : text.size() - HeldBack(text, sampling.stop);
  if (safe > emitted) {
    ev->text = text.substr(emitted, safe - emitted);
    emitted = safe;
  }
  return finish;
}

}  // namespace rote::inference
