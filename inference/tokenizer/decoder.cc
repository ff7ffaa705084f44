// Decoding: tokenizers' decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and
// Sequences of them) over the token strings of the ids, in tokenizer.json's order.
#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

// Rust's String::from_utf8: the bytes as a string when they are valid UTF-8.
bool ValidUtf8(std::string_view bytes) { return utf8::IsValid(bytes); }

void ByteFallbackChain(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;  // bytes of consecutive "<0xAB>" tokens
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (ValidUtf8(run)) {
      out.push_back(run);
    } else {
      // One U+FFFD per byte token, as tokenizers does for an invalid run.
      for (size_t i = 0; i < run_tokens; ++i) out.emplace_back(utf8::kReplacement);
    }
    run.clear();
    run_tokens = 0;
  };
  for (std::string& t : tokens) {
    const int b = ByteFallbackValue(t);
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      ++run_tokens;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

// Up to `start` leading and `stop` trailing `c` characters removed; only the ends are read.
std::string StripToken(const std::string& token, char32_t c, size_t start, size_t stop) {
  size_t b0 = 0;
  for (size_t n = 0; n < start && b0 < token.size(); ++n) {
    size_t next = b0;
    if (utf8::DecodeAt(token, next) != c) break;
    b0 = next;
  }
  size_t b1 = token.size();
  for (size_t n = 0; n < stop && b1 > b0; ++n) {
    size_t at = b1 - 1;
    while (at > b0 && (static_cast<unsigned char>(token[at]) & 0xC0) == 0x80) --at;
    size_t probe = at;
    if (utf8::DecodeAt(token, probe) != c) break;
    b1 = at;
  }
  return token.substr(b0, b1 - b0);
}

// `continuation`: the tokens follow earlier ones whose text began. `joined`: an earlier step
// (Fuse, ByteLevel) made the tokens one string, so "the first token" is the whole text.
void RunStep(const DecoderStep& step, std::vector<std::string>& tokens, bool continuation, bool joined) {
  using Kind = DecoderStep::Kind;
  switch (step.kind) {
    case Kind::kByteLevel: {
      std::string bytes;
      for (const std::string& t : tokens) bytes += ByteLevelDecodeToken(t);
      tokens.assign(1, utf8::Sanitize(bytes));
      break;
    }
    case Kind::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        const bool drop = i == 0 && !step.prepend_never && (joined || !continuation);
        tokens[i] = ReplaceLiteral(tokens[i], step.content, drop ? "" : " ");
      }
      break;
    case Kind::kReplace:
      for (std::string& t : tokens) {
        t = step.literal.empty() ? ReplaceAll(step.pattern.get(), t, step.content)
                                 : ReplaceLiteral(t, step.literal, step.content);
      }
      break;
    case Kind::kByteFallback:
      ByteFallbackChain(tokens);
      break;
    case Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      break;
    }
    case Kind::kStrip:
      for (std::string& t : tokens) {
        t = StripToken(t, step.strip_char, continuation && joined ? 0 : step.strip_start, step.strip_stop);
      }
      break;
  }
}

}  // namespace

int ByteFallbackValue(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  // u8::from_str_radix(&token[3..5], 16): two hex digits, or '+' and one.
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int lo = hex(token[4]);
  if (lo < 0) return -1;
  if (token[3] == '+') return lo;
  const int hi = hex(token[3]);
  return hi < 0 ? -1 : hi * 16 + lo;
}

std::string RunDecoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens, bool continuation) {
  bool joined = false;
  for (const DecoderStep& step : steps) {
    RunStep(step, tokens, continuation, joined);
    joined = joined || step.kind == DecoderStep::Kind::kFuse || step.kind == DecoderStep::Kind::kByteLevel;
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string DecodeTokenAlone(const std::vector<DecoderStep>& steps, const std::string& token) {
  std::vector<std::string> tokens{token};
  for (const DecoderStep& step : steps) {
    if (step.kind == DecoderStep::Kind::kByteFallback) {
      const int b = ByteFallbackValue(tokens.size() == 1 ? tokens[0] : std::string());
      if (b >= 0) return std::string(1, static_cast<char>(b));
      continue;
    }
    if (step.kind == DecoderStep::Kind::kByteLevel) {
      std::string bytes;
      for (const std::string& t : tokens) bytes += ByteLevelDecodeToken(t);
      tokens.assign(1, std::move(bytes));  // raw: may be part of a character
      continue;
    }
    // Strip and Metaspace's first-token rule belong to the whole text, not one token.
    if (step.kind == DecoderStep::Kind::kStrip) continue;
    if (step.kind == DecoderStep::Kind::kMetaspace) {
      for (std::string& t : tokens) t = ReplaceLiteral(t, step.content, " ");
      continue;
    }
    RunStep(step, tokens, /*continuation=*/true, /*joined=*/false);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

Status LoadDecoder(const Json& d, const std::string& field, std::vector<DecoderStep>& steps) {
  if (d.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(d, field));
  const JsonFields f(d, kTokenizerJson, field + ".");
  using Kind = DecoderStep::Kind;
  DecoderStep step;
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(d, "decoders", field));
    for (const Json& child : *children) ROTE_RETURN_IF_ERROR(LoadDecoder(child, field + ".decoders[]", steps));
    return OkStatus();
  }
  if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    ROTE_RETURN_IF_ERROR(OneCharField(f, "replacement", "\xE2\x96\x81", &step.content));
    std::string scheme;
    ROTE_RETURN_IF_ERROR(f.String("prepend_scheme", "always", &scheme));
    bool add_prefix_space = true;
    ROTE_RETURN_IF_ERROR(f.Bool("add_prefix_space", true, &add_prefix_space));
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return f.Error("prepend_scheme", "must be always, first or never");
    }
    step.prepend_never = scheme == "never" || !add_prefix_space;
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    ROTE_ASSIGN_OR_RETURN(step.pattern, CompilePatternNode(f.Find("pattern"), field + ".pattern", &step.literal));
    ROTE_RETURN_IF_ERROR(f.String("content", "", &step.content));
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    std::string content;
    ROTE_RETURN_IF_ERROR(OneCharField(f, "content", " ", &content));
    size_t first = 0;
    step.strip_char = utf8::DecodeAt(content, first);
    int64_t start = 0, stop = 0;
    ROTE_RETURN_IF_ERROR(f.Int("start", 0, 0, 1 << 20, &start));
    ROTE_RETURN_IF_ERROR(f.Int("stop", 0, 0, 1 << 20, &stop));
    step.strip_start = static_cast<size_t>(start);
    step.strip_stop = static_cast<size_t>(stop);
  } else {
    return InvalidArgument("tokenizer.json: decoder type '" + type +
                         "' is not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, "
                         "Fuse, Strip, Sequence)");
  }
  steps.push_back(std::move(step));
  return OkStatus();
}

}  // namespace tokenizer_internal

std::string Tokenizer::Impl::DecodeIds(std::span<const int32_t> ids, bool skip_special, bool continuation) const {
  auto wanted = [&](int32_t id) {
    return id >= 0 && static_cast<size_t>(id) < id_known.size() && id_known[id] && !(skip_special && id_special[id]);
  };
  if (byte_level_decoder) {
    std::string bytes;
    for (int32_t id : ids) {
      if (wanted(id)) bytes += id_bytes[id];
    }
    return utf8::Sanitize(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (wanted(id)) tokens.push_back(id_token[id]);
  }
  if (!has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 || continuation) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  return tokenizer_internal::RunDecoder(decoder, std::move(tokens), continuation);
}

}  // namespace rote::inference
