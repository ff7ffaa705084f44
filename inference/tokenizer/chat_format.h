// Chat rendering: the model's own chat template (tokenizer_config.json's chat_template) run by
// rote's Jinja interpreter (jinja/jinja.h), and the built-in formats of the Qwen2, Llama 3 and
// Qwen3 families as the fallback for a directory without a template. Each built-in format
// reproduces, for conversations of system/user/assistant/tool messages without tool
// definitions, what the family's published template renders through transformers'
// apply_chat_template.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/status.h"
#include "inference/tokenizer/jinja/jinja.h"
#include "inference/tokenizer/tokenizer.h"

namespace rote::inference {

struct ChatFormat {
  ChatFamily family = ChatFamily::kQwen2;
  // Qwen2: inserted as the system message when the first message is not "system"; read from
  // the model's chat_template ("You are a helpful assistant." for Qwen2, "You are Qwen, created
  // by Alibaba Cloud. You are a helpful assistant." for Qwen2.5), absent if it has none.
  std::optional<std::string> default_system_prompt;
  // Llama 3.1+ templates open with a system header carrying "Cutting Knowledge Date" and a
  // date; Llama 3.0's does not. The date is the templates' own fixed default, never today's
  // (Llama 3.2's template would ask for the clock; rote stays deterministic).
  bool llama_dated_system_header = true;
  std::string bos_text = "<|begin_of_text|>";

  // The model's own template, parsed; null when the directory has none or it does not parse
  // (template_error then says why, with the line).
  std::shared_ptr<const jinja::Template> jinja_template;
  std::string template_error;
  // tokenizer_config.json's special tokens by name (bos_token, eos_token, unk_token, sep_token,
  // pad_token, cls_token, mask_token), the variables transformers gives every template. When
  // empty, Llama 3's bos_text stands in for bos_token.
  std::map<std::string, std::string> special_tokens;
};

// Derives the format details from tokenizer_config.json's chat_template (empty if absent) and
// parses it.
ChatFormat ChatFormatFor(ChatFamily family, std::string_view chat_template);

// The built-in format of the family (the fallback), ignoring any template.
std::string FormatBuiltinChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt);

// The model's template when it has one, else the built-in format. A template that fails
// (raise_exception, an error, a limit) falls back to the built-in format here; RenderChat
// reports the error instead.
std::string FormatChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt);

// Renders the template with the variables transformers' apply_chat_template gives it: messages,
// tools (null when absent), documents (null), add_generation_prompt, the special tokens, and
// `extra` (an object of further variables, e.g. enable_thinking). Without a template: the
// built-in format when `messages` holds only role/content strings and there are no tools,
// else FAILED_PRECONDITION. Template errors are INVALID_ARGUMENT naming the template line.
StatusOr<std::string> RenderChat(const ChatFormat& format, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra, const jinja::Date& date = {});

}  // namespace rote::inference
