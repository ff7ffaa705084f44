// `model tokenize | detokenize | chat` (tokenizer_tool.h).
#include "inference/tokenizer/tokenizer_tool.h"

#include <charconv>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "inference/tokenizer/tokenizer.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference::tool {

namespace {

using Json = nlohmann::json;

constexpr const char* kUsage =
    "usage: model tokenize DIR [--text TEXT | --file PATH] [--add-special-tokens] [--special-as-text] [--json]"
    " | model detokenize DIR [--ids 1,2,3 | ID...] [--skip-special] [--json]"
    " | model chat DIR [--system TEXT] [--user TEXT] [--assistant TEXT] [--tool TEXT]... [--messages FILE]"
    " [--no-generation-prompt] [--json]";

Status Usage(const std::string& problem) { return InvalidArgument(std::string(kUsage) + "\n" + problem); }

// The command line in order: --name value pairs (or --name for booleans) and positionals.
struct Parsed {
  std::vector<std::pair<std::string, std::string>> flags;
  std::vector<std::string> positionals;
  bool Has(const std::string& name) const {
    for (const auto& [n, v] : flags) {
      if (n == name) return true;
    }
    return false;
  }
  std::string Get(const std::string& name) const {
    for (const auto& [n, v] : flags) {
      if (n == name) return v;
    }
    return {};
  }
};

StatusOr<Parsed> Parse(const std::vector<std::string>& args, const std::set<std::string>& valued,
                       const std::set<std::string>& boolean) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      p.positionals.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (boolean.count(name)) {
      if (inline_value) return Usage("--" + name + " takes no value");
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return Usage("--" + name + " needs a value");
        value = args[++i];
      }
    } else {
      return Usage("unknown flag --" + name);
    }
    p.flags.emplace_back(name, value);
  }
  return p;
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A token's text for a terminal: UTF-8 as it is, control characters and bytes that are not
// UTF-8 escaped, in double quotes.
std::string Quote(std::string_view bytes) {
  std::string out = "\"";
  auto escape_byte = [&out](unsigned char b) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  };
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[pos]);
    if (b >= 0x80) {
      // The longest valid character here, else the byte escaped.
      size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
      if (pos + len <= bytes.size() && len > 1 && utf8::IsValid(bytes.substr(pos, len))) {
        out += bytes.substr(pos, len);
        pos += len;
        continue;
      }
      escape_byte(b);
      ++pos;
      continue;
    }
    switch (b) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (b < 0x20 || b == 0x7F) {
          escape_byte(b);
        } else {
          out += static_cast<char>(b);
        }
    }
    ++pos;
  }
  return out + "\"";
}

StatusOr<Tokenizer> LoadTokenizer(const Parsed& p, const char* subcommand) {
  if (p.positionals.empty()) return Usage(std::string("model ") + subcommand + " needs a model directory");
  return Tokenizer::Load(p.positionals[0]);
}

Status Tokenize(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  ROTE_ASSIGN_OR_RETURN(Parsed p, Parse(args, {"text", "file"}, {"add-special-tokens", "special-as-text", "json"}));
  if (p.positionals.size() > 1) return Usage("unexpected argument '" + p.positionals[1] + "'");
  if (p.Has("text") && p.Has("file")) return Usage("give --text or --file, not both");
  ROTE_ASSIGN_OR_RETURN(Tokenizer tok, LoadTokenizer(p, "tokenize"));
  std::string text;
  if (p.Has("text")) {
    text = p.Get("text");
  } else if (p.Has("file")) {
    ROTE_ASSIGN_OR_RETURN(text, ReadFile(p.Get("file")));
  } else {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto add = p.Has("add-special-tokens") ? Tokenizer::AddSpecialTokens::kYes : Tokenizer::AddSpecialTokens::kNo;
  const std::vector<int32_t> ids = tok.Encode(text, add, /*parse_special=*/!p.Has("special-as-text"));
  if (p.Has("json")) {
    Json j = {{"ids", ids}, {"tokens", Json::array()}};
    for (int32_t id : ids) j["tokens"].push_back(utf8::Sanitize(tok.TokenText(id)));
    out << j.dump() << "\n";
    return OkStatus();
  }
  out << ids.size() << " tokens\n";
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << "\n";
  // id, the token as the vocabulary writes it, the bytes it stands for.
  for (int32_t id : ids) {
    out << id << "\t" << Quote(tok.TokenText(id)) << "\t" << Quote(tok.TokenBytes(id))
        << (tok.IsSpecial(id) ? "\tspecial" : "") << "\n";
  }
  return OkStatus();
}

// Ids from "1,2,3", "1 2 3" or several words; each must name a token.
StatusOr<std::vector<int32_t>> ParseIds(const std::vector<std::string>& words, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const std::string& w : words) {
    size_t pos = 0;
    while (pos < w.size()) {
      if (w[pos] == ',' || w[pos] == ' ' || w[pos] == '\n' || w[pos] == '\t' || w[pos] == '\r') {
        ++pos;
        continue;
      }
      size_t end = pos;
      while (end < w.size() && w[end] != ',' && w[end] != ' ' && w[end] != '\n' && w[end] != '\t' && w[end] != '\r') {
        ++end;
      }
      const std::string item = w.substr(pos, end - pos);
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (ec != std::errc() || ptr != item.data() + item.size()) {
        return InvalidArgument("'" + item + "' is not a token id (ids are integers)");
      }
      if (v < 0 || v >= tok.vocab_size() || tok.TokenText(static_cast<int32_t>(v)).empty()) {
        return InvalidArgument("token id " + item + " names no token (the vocabulary has ids 0.." +
                               std::to_string(tok.vocab_size() - 1) + ")");
      }
      ids.push_back(static_cast<int32_t>(v));
      pos = end;
    }
  }
  return ids;
}

Status Detokenize(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  ROTE_ASSIGN_OR_RETURN(Parsed p, Parse(args, {"ids"}, {"skip-special", "json"}));
  ROTE_ASSIGN_OR_RETURN(Tokenizer tok, LoadTokenizer(p, "detokenize"));
  std::vector<std::string> words(p.positionals.begin() + 1, p.positionals.end());
  if (p.Has("ids")) words.push_back(p.Get("ids"));
  if (words.empty()) words.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  ROTE_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, ParseIds(words, tok));
  const std::string text = tok.Decode(ids, p.Has("skip-special"));
  if (p.Has("json")) {
    out << Json({{"text", text}}).dump() << "\n";
  } else {
    out << text << "\n";
  }
  return OkStatus();
}

Status Chat(const std::vector<std::string>& args, std::ostream& out) {
  ROTE_ASSIGN_OR_RETURN(Parsed p, Parse(args, {"system", "user", "assistant", "tool", "messages"},
                                        {"no-generation-prompt", "json"}));
  if (p.positionals.size() > 1) return Usage("unexpected argument '" + p.positionals[1] + "'");
  ROTE_ASSIGN_OR_RETURN(Tokenizer tok, LoadTokenizer(p, "chat"));
  std::vector<ChatMessage> messages;
  for (const auto& [name, value] : p.flags) {
    if (name == "system" || name == "user" || name == "assistant" || name == "tool") {
      messages.push_back({name, value});
    } else if (name == "messages") {
      ROTE_ASSIGN_OR_RETURN(const std::string text, ReadFile(value));
      const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!j.is_array()) return InvalidArgument(value + ": must be a JSON list of {\"role\", \"content\"} objects");
      for (const Json& m : j) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string()) {
          return InvalidArgument(value + ": every message must be {\"role\": string, \"content\": string}");
        }
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
    }
  }
  if (messages.empty()) return Usage("model chat needs messages (--user TEXT, --messages FILE, ...)");
  const std::string prompt = tok.ApplyChatTemplate(messages, !p.Has("no-generation-prompt"));
  // Chat prompts are encoded as transformers' apply_chat_template(tokenize=True): no added BOS.
  const std::vector<int32_t> ids = tok.Encode(prompt, Tokenizer::AddSpecialTokens::kNo);
  if (p.Has("json")) {
    out << Json({{"prompt", prompt}, {"ids", ids}}).dump() << "\n";
    return OkStatus();
  }
  out << prompt;
  if (!prompt.empty() && prompt.back() != '\n') out << "\n";
  out << "-- " << ids.size() << " tokens\n";
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << "\n";
  return OkStatus();
}

}  // namespace

bool IsTokenizerSubcommand(const std::string& subcommand) {
  return subcommand == "tokenize" || subcommand == "detokenize" || subcommand == "chat";
}

Status TokenizerCommand(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  if (args.empty() || !IsTokenizerSubcommand(args[0])) return Usage("expected tokenize, detokenize or chat");
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "tokenize") return Tokenize(rest, in, out);
  if (args[0] == "detokenize") return Detokenize(rest, in, out);
  return Chat(rest, out);
}

}  // namespace rote::inference::tool
