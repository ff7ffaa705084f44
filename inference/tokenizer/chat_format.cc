#include "inference/tokenizer/chat_format.h"

#include <cstdio>

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {

namespace {

constexpr std::string_view kQwen2DefaultSystem = "You are a helpful assistant.";
constexpr std::string_view kLlamaDefaultDate = "26 Jul 2024";

// Jinja's `trim` filter: Python's str.strip() with no argument.
std::string PyStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t next = begin;
    if (!utf8::IsPythonSpace(utf8::DecodeAt(s, next))) break;
    begin = next;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t probe = start;
    if (!utf8::IsPythonSpace(utf8::DecodeAt(s, probe))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// transformers' tojson filter on a string: json.dumps(ensure_ascii=False).
std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out += "\"";
  return out;
}

// Qwen's templates write the default system prompt as one Jinja string literal:
// '<|im_start|>system\n...<|im_end|>\n'. Find a literal holding both markers.
std::optional<std::string> ExtractQwenDefaultSystem(std::string_view tpl) {
  constexpr std::string_view kOpen = "<|im_start|>system\\n";
  constexpr std::string_view kClose = "<|im_end|>";
  size_t at = 0;
  // The first kClose at or after the current literal's body. Kept across candidates (it only
  // moves forward), so a template full of openings without a close is scanned once, not once
  // per opening.
  size_t close = 0;
  while ((at = tpl.find(kOpen, at)) != std::string_view::npos) {
    if (at == 0) { at += kOpen.size(); continue; }
    const char quote = tpl[at - 1];
    const size_t body = at + kOpen.size();
    if (quote == '\'' || quote == '"') {
      if (close != std::string_view::npos && close < body) close = tpl.find(kClose, body);
      if (close == std::string_view::npos) return std::nullopt;
      const size_t end_quote = tpl.find(quote, body);
      if (end_quote != std::string_view::npos && close < end_quote && close > body) {
        // Undo the literal's escapes (\n, \', \").
        std::string prompt;
        std::string_view raw = tpl.substr(body, close - body);
        for (size_t i = 0; i < raw.size(); ++i) {
          if (raw[i] == '\\' && i + 1 < raw.size()) {
            const char e = raw[++i];
            prompt.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
          } else {
            prompt.push_back(raw[i]);
          }
        }
        return prompt;
      }
    }
    at = body;
  }
  return std::nullopt;
}

std::string FormatQwen2(const ChatFormat& f, const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  if (!msgs.empty() && msgs[0].role == "system") {
    out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  } else if (f.default_system_prompt) {
    out += "<|im_start|>system\n" + *f.default_system_prompt + "<|im_end|>\n";
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user" || (m.role == "system" && i != 0) || m.role == "assistant") {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    }
    // Other roles render nothing, as in the template.
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string FormatQwen3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  if (!msgs.empty() && msgs[0].role == "system") {
    out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  }
  // The last user message that is a real query (not a wrapped tool response): assistant turns
  // after it keep their reasoning, earlier ones lose it.
  size_t last_query = msgs.empty() ? 0 : msgs.size() - 1;
  for (size_t k = msgs.size(); k-- > 0;) {
    const ChatMessage& m = msgs[k];
    if (m.role == "user" &&
        !(StartsWith(m.content, "<tool_response>") && EndsWith(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    const bool last = i + 1 == msgs.size();
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      std::string reasoning;
      const size_t close = content.find("</think>");
      if (close != std::string_view::npos) {
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
        std::string_view before = RStripNewlines(content.substr(0, close));
        const size_t open = before.rfind("<think>");
        if (open != std::string_view::npos) before = before.substr(open + 7);
        reasoning = std::string(LStripNewlines(before));
        // content.split('</think>')[-1].lstrip('\n')
        content = LStripNewlines(content.substr(content.rfind("</think>") + 8));
      }
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>" + m.role + "\n<think>\n" +
               std::string(LStripNewlines(RStripNewlines(reasoning))) + "\n</think>\n\n" +
               std::string(LStripNewlines(content));
      } else {
        out += "<|im_start|>" + m.role + "\n" + std::string(content);
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (last || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string FormatLlama3(const ChatFormat& f, const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  auto header = [](std::string_view role) {
    return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
  };
  auto turn = [&](const ChatMessage& m) {
    if (m.role == "tool" || m.role == "ipython") {
      // The template tests `content is iterable`, which a string is, so it is JSON-quoted.
      return header("ipython") + JsonString(m.content) + "<|eot_id|>";
    }
    return header(m.role) + PyStrip(m.content) + "<|eot_id|>";
  };
  if (f.llama_dated_system_header) {
    out += f.bos_text;
    size_t first = 0;
    std::string system;
    if (!msgs.empty() && msgs[0].role == "system") {
      system = PyStrip(msgs[0].content);
      first = 1;
    }
    out += header("system");
    out += "Cutting Knowledge Date: December 2023\nToday Date: ";
    out += kLlamaDefaultDate;
    out += "\n\n" + system + "<|eot_id|>";
    for (size_t i = first; i < msgs.size(); ++i) out += turn(msgs[i]);
  } else {
    // Llama 3.0: every message, the system one included, as a plain turn; BOS before the first.
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (i == 0) out += f.bos_text;
      out += header(msgs[i].role) + PyStrip(msgs[i].content) + "<|eot_id|>";
    }
  }
  if (gen) out += header("assistant");
  return out;
}

}  // namespace

ChatFormat ChatFormatFor(ChatFamily family, std::string_view chat_template) {
  ChatFormat f;
  f.family = family;
  if (!chat_template.empty()) {
    StatusOr<jinja::Template> parsed = jinja::Template::Parse(chat_template);
    if (parsed.ok()) {
      f.jinja_template = std::make_shared<const jinja::Template>(std::move(*parsed));
    } else {
      f.template_error = parsed.status().message();
    }
  }
  if (family == ChatFamily::kQwen2) {
    if (chat_template.empty()) {
      f.default_system_prompt = std::string(kQwen2DefaultSystem);
    } else {
      f.default_system_prompt = ExtractQwenDefaultSystem(chat_template);
    }
  }
  if (family == ChatFamily::kLlama3 && !chat_template.empty()) {
    f.llama_dated_system_header =
        chat_template.find("Cutting Knowledge Date") != std::string_view::npos;
  }
  return f;
}

std::string FormatBuiltinChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                              bool add_generation_prompt) {
  switch (format.family) {
    case ChatFamily::kQwen2: return FormatQwen2(format, messages, add_generation_prompt);
    case ChatFamily::kQwen3: return FormatQwen3(messages, add_generation_prompt);
    case ChatFamily::kLlama3: return FormatLlama3(format, messages, add_generation_prompt);
  }
  return {};
}

namespace {

nlohmann::ordered_json MessagesJson(const std::vector<ChatMessage>& messages) {
  auto list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return list;
}

// Whether every message is {role, content} with string values: what the built-in formats take.
bool PlainMessages(const nlohmann::ordered_json& messages, std::vector<ChatMessage>* out) {
  if (!messages.is_array()) return false;
  for (const auto& m : messages) {
    if (!m.is_object()) return false;
    auto role = m.find("role");
    auto content = m.find("content");
    if (role == m.end() || !role->is_string() || content == m.end() || !content->is_string()) return false;
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() != "role" && it.key() != "content") return false;
    }
    out->push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return true;
}

}  // namespace

StatusOr<std::string> RenderChat(const ChatFormat& format, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra, const jinja::Date& date) {
  if (!format.template_error.empty()) return InvalidArgument(format.template_error);
  if (!messages.is_array()) return InvalidArgument("chat messages must be a list");
  if (!format.jinja_template) {
    std::vector<ChatMessage> plain;
    if (!PlainMessages(messages, &plain) || !(tools.is_null() || (tools.is_array() && tools.empty()))) {
      return FailedPrecondition(
          "the model directory has no chat template, and the built-in format takes only role/content "
          "messages without tools");
    }
    return FormatBuiltinChat(format, plain, add_generation_prompt);
  }
  // As transformers: the special tokens, then the caller's variables (which may override them).
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  for (const auto& [name, text] : format.special_tokens) context[name] = text;
  if (format.special_tokens.empty() && format.family == ChatFamily::kLlama3) {
    context["bos_token"] = format.bos_text;
  }
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  }
  context["messages"] = messages;
  context["tools"] = tools.is_array() && !tools.empty() ? tools : nlohmann::ordered_json(nullptr);
  // transformers' `documents` argument (RAG templates such as Command R's); None unless given.
  context["documents"] = extra.is_object() && extra.contains("documents") ? extra["documents"] : nlohmann::ordered_json(nullptr);
  context["add_generation_prompt"] = add_generation_prompt;
  return format.jinja_template->Render(context, date);
}

std::string FormatChat(const ChatFormat& format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt) {
  if (format.jinja_template) {
    StatusOr<std::string> text = RenderChat(format, MessagesJson(messages), nullptr, add_generation_prompt,
                                            nlohmann::ordered_json::object());
    if (text.ok()) return *std::move(text);
  }
  return FormatBuiltinChat(format, messages, add_generation_prompt);
}

StatusOr<std::string> Tokenizer::RenderChat(const ChatRequest& request) const {
  using OJson = nlohmann::ordered_json;
  auto parse = [](const std::string& text, const char* what, OJson dflt) -> StatusOr<OJson> {
    if (text.empty()) return dflt;
    OJson j = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgument(std::string("chat request: ") + what + " is not valid JSON");
    return j;
  };
  OJson messages;
  if (request.messages_json.empty()) {
    messages = MessagesJson(request.messages);
  } else {
    ROTE_ASSIGN_OR_RETURN(messages, parse(request.messages_json, "messages", OJson::array()));
    if (!messages.is_array()) return InvalidArgument("chat request: messages must be a JSON list");
  }
  ROTE_ASSIGN_OR_RETURN(OJson tools, parse(request.tools_json, "tools", OJson(nullptr)));
  if (!tools.is_null() && !tools.is_array()) return InvalidArgument("chat request: tools must be a JSON list");
  ROTE_ASSIGN_OR_RETURN(OJson extra, parse(request.extra_json, "extra", OJson::object()));
  if (!extra.is_object()) return InvalidArgument("chat request: extra must be a JSON object");
  jinja::Date date;
  date.year = request.year;
  date.month = request.month;
  date.day = request.day;
  if (date.month < 1 || date.month > 12 || date.day < 1 || date.day > 31) {
    return InvalidArgument("chat request: the date must be a calendar day");
  }
  return inference::RenderChat(impl_->chat, messages, tools, request.add_generation_prompt, extra, date);
}

bool Tokenizer::has_chat_template() const { return impl_->chat.jinja_template != nullptr; }

}  // namespace rote::inference
