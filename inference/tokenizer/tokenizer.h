// BPE tokenizer read from a Hugging Face model directory (tokenizer.json, tokenizer_config.json,
// generation_config.json, config.json), giving the same ids and text as the Hugging Face
// `tokenizers` library: byte-level BPE (Qwen2/2.5/3, Llama 3, DeepSeek) and SentencePiece-style
// BPE with byte fallback (Llama 2, Mistral, Gemma), plus the chat formats.
// docs/tokenizer.md says what is supported and why.
//
// A Tokenizer is immutable after Load: every const method may be called from any number of
// threads at once, and copies are cheap (they share the loaded tables).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inference/status.h"

namespace rote::inference {

// Which built-in chat format applies; chosen from config.json's model_type (tokenizer_config's
// chat_template refines details such as Qwen2's default system prompt).
enum class ChatFamily {
  kQwen2,   // ChatML; a default system prompt is inserted when the first message is not system
  kLlama3,  // <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kQwen3,   // ChatML without default system prompt; <think> blocks of earlier turns dropped
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" (Qwen also "tool")
  std::string content;  // UTF-8
};

class Tokenizer {
 public:
  // Reads <model_dir>/tokenizer.json (required), tokenizer_config.json (chat template hints,
  // bos/eos), config.json (model_type, eos_token_id) and generation_config.json (eos_token_id,
  // which wins for stop tokens when present).
  static StatusOr<Tokenizer> Load(const std::string& model_dir);

  // Same, from file contents already in memory (empty string_view = file absent, except
  // tokenizer_json which is required).
  static StatusOr<Tokenizer> FromJson(std::string_view tokenizer_json,
                                      std::string_view tokenizer_config_json,
                                      std::string_view config_json,
                                      std::string_view generation_config_json);

  // Text to ids, as tokenizers' encode(text, add_special_tokens=False): no post-processor ids
  // (no BOS). This is how chat prompts are encoded (transformers' apply_chat_template with
  // tokenize=True): the template writes its own markers. parse_special=false treats the text of
  // special added tokens as plain text (like tokenizers' encode_special_tokens=True); non-special
  // added tokens are still recognised either way, as in tokenizers. Invalid UTF-8 in `text` is
  // replaced by U+FFFD.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true) const;

  // Whether Encode adds the ids tokenizer.json's post-processor puts around a sequence.
  enum class AddSpecialTokens : bool { kNo = false, kYes = true };
  // tokenizers' encode(text, add_special_tokens=...): with kYes the post-processor's ids
  // (TemplateProcessing's BOS for Llama 2, Gemma; RobertaProcessing's / BertProcessing's cls and
  // sep) surround Encode(text, parse_special); with kNo it is Encode(text, parse_special).
  std::vector<int32_t> Encode(std::string_view text, AddSpecialTokens add_special_tokens,
                              bool parse_special = true) const;
  // The ids the post-processor puts before and after a single sequence.
  const std::vector<int32_t>& special_prefix_ids() const;
  const std::vector<int32_t>& special_suffix_ids() const;

  // Ids to text, as tokenizers' decode: the tokens' strings through tokenizer.json's decoder
  // (ByteLevel: bytes read as UTF-8 with invalid sequences replaced by U+FFFD; SentencePiece
  // style: Replace, ByteFallback, Fuse, Strip, Metaspace). Unknown ids are skipped.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one token stands for alone (may be part of a UTF-8 character); empty for an
  // unknown id.
  std::string TokenBytes(int32_t id) const;
  // The token's own string (a vocabulary entry or an added token's content); empty if unknown.
  std::string TokenText(int32_t id) const;

  // Ids are in [0, vocab_size()): the model vocabulary plus added tokens.
  int32_t vocab_size() const;
  std::optional<int32_t> TokenToId(std::string_view token) const;  // vocab or added token
  bool IsSpecial(int32_t id) const;  // an added token marked "special"

  // Ids that end generation: generation_config.json's eos_token_id (int or list), else
  // config.json's, else tokenizer_config's eos_token; for chat models the family's turn end
  // (<|im_end|> / <|eot_id|>) is included when it exists. Sorted, no duplicates.
  const std::vector<int32_t>& stop_token_ids() const;
  std::optional<int32_t> bos_id() const;  // Llama 3: <|begin_of_text|>; Qwen: none
  std::optional<int32_t> eos_id() const;  // tokenizer_config's eos_token, if it names a token

  ChatFamily chat_family() const;

  // The prompt text in the family's chat format, identical to transformers'
  // apply_chat_template(messages, tokenize=False, add_generation_prompt=...) with the family's
  // published template (Qwen2.5, Llama 3.1, Qwen3; no tools). Encode the result with
  // parse_special=true.
  std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const;

  // ---- The model's own chat template (docs/tokenizer.md "Chat templates") ----
  // What transformers' apply_chat_template(messages, tools=..., add_generation_prompt=...,
  // tokenize=False, **extra) takes.
  struct ChatRequest {
    std::vector<ChatMessage> messages;  // used when messages_json is empty
    // A JSON list of message objects as transformers takes them (role, content as a string or a
    // list of parts, tool_calls, tool_call_id, name, reasoning_content, ...).
    std::string messages_json;
    std::string tools_json;  // a JSON list of tool schemas; empty: none (the template sees None)
    bool add_generation_prompt = true;
    std::string extra_json;  // a JSON object of further template variables (enable_thinking, ...)
    // The day strftime_now formats: rendering never reads the clock.
    int year = 2024, month = 7, day = 26;
  };
  // The prompt text rendered by the model's chat template, or by the family's built-in format
  // when the directory has none (then only role/content messages without tools). Errors, all
  // INVALID_ARGUMENT naming the template line where there is one: malformed JSON, a template
  // that does not parse, raises (raise_exception) or exceeds a limit. Unlike ApplyChatTemplate,
  // which falls back to the built-in format on a template error, this reports it.
  StatusOr<std::string> RenderChat(const ChatRequest& request) const;
  bool has_chat_template() const;  // the directory has a template that parses

  struct Impl;  // defined in tokenizer_internal.h

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Turns a stream of generated ids into text, emitting only text no later token can change:
// bytes of a character split across tokens (and a run of byte-fallback tokens) are held back
// until complete. The concatenation of all Push results and Finish equals Decode(all ids,
// skip_special). Not thread-safe (one per stream).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // Text completed by this token (possibly empty).
  std::string Push(int32_t id);
  // Flushes held-back text at the end of the stream (an incomplete character becomes U+FFFD).
  std::string Finish();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;  // ByteLevel: bytes not yet emitted, a prefix of an unfinished character
  // Other decoders: the ids since the last point where decoding can restart, and what of their
  // text was emitted.
  std::vector<int32_t> window_;
  size_t window_emitted_ = 0;
  bool continuation_ = false;  // the window does not start the text
};

}  // namespace rote::inference
