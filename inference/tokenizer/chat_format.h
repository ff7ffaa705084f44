// The built-in chat formats of the supported families. Each reproduces, for conversations of
// system/user/assistant/tool messages without tool definitions, the text that the family's
// published Jinja template renders through transformers' apply_chat_template. rote does not run
// Jinja: a template is code we would have to sandbox, and the published ones are few.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
};

// Derives the format details from tokenizer_config.json's chat_template (empty if absent).
ChatFormat ChatFormatFor(ChatFamily family, std::string_view chat_template);

std::string FormatChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt);

}  // namespace rote::inference
