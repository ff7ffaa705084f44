// A model directory's tokenizer files, cut at fuzz_util.h's separator: tokenizer.json,
// tokenizer_config.json, config.json, generation_config.json, then a text to tokenize. Loading
// must answer with a status, never crash or allocate by a number in the file; a tokenizer that
// loads must keep the promises of tokenizer.h on the text.
#include <cstdint>
#include <string>

#include "bench/fuzz/fuzz_util.h"
#include "inference/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::inference;
  std::vector<std::string_view> parts = rote::fuzz::SplitParts(data, size, 5);
  StatusOr<Tokenizer> loaded = Tokenizer::FromJson(parts[0], parts[1], parts[2], parts[3]);
  if (!loaded.ok()) return 0;
  const Tokenizer& tok = *loaded;
  const std::string_view text = parts[4];
  // Stop ids come from config.json / generation_config.json and may lie past the tokenizer's
  // entries (a model's vocabulary may be larger; tokenizer_json.cc, LoadSpecialIds); they must still be token ids,
  // and decoding one must not read outside the tables.
  for (int32_t id : tok.stop_token_ids()) {
    ROTE_FUZZ_CHECK(id >= 0);
    const int32_t one[] = {id};
    (void)tok.Decode(one, false);
    (void)tok.TokenBytes(id);
  }
  if (tok.bos_id()) ROTE_FUZZ_CHECK(*tok.bos_id() >= 0 && *tok.bos_id() < tok.vocab_size());
  if (tok.eos_id()) ROTE_FUZZ_CHECK(*tok.eos_id() >= 0 && *tok.eos_id() < tok.vocab_size());

  for (bool parse_special : {true, false}) {
    std::vector<int32_t> ids = tok.Encode(text, parse_special);
    for (int32_t id : ids) ROTE_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    // add_special_tokens puts the post-processor's ids around the same encoding.
    const std::vector<int32_t> with = tok.Encode(text, Tokenizer::AddSpecialTokens::kYes, parse_special);
    ROTE_FUZZ_CHECK(with.size() == tok.special_prefix_ids().size() + ids.size() + tok.special_suffix_ids().size());
    for (int32_t id : with) ROTE_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    for (bool skip_special : {false, true}) {
      const std::string decoded = tok.Decode(ids, skip_special);
      // Streaming gives the same text as decoding at once (tokenizer.h, StreamDecoder).
      StreamDecoder stream(tok, skip_special);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.Push(id);
      streamed += stream.Finish();
      ROTE_FUZZ_CHECK(streamed == decoded);
    }
  }
  std::vector<ChatMessage> messages = {{"system", "s"}, {"user", std::string(text)}, {"assistant", std::string(text)}};
  const std::string prompt = tok.ApplyChatTemplate(messages, /*add_generation_prompt=*/true);
  for (int32_t id : tok.Encode(prompt, true)) ROTE_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  return 0;
}
