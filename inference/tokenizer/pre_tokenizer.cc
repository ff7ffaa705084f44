// The pre-tokenizer: regex splits (PCRE2, with the pattern exactly as tokenizer.json writes it)
// and ByteLevel's prefix space, applied in order before BPE runs on each piece.
#include <deque>

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

StatusOr<Pcre2Code> CompileRegex(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return InvalidArgument("tokenizer.json: pre-tokenizer regex does not compile with PCRE2 at offset " +
                           std::to_string(offset) + ": " + reinterpret_cast<char*>(message) +
                           " (pattern: " + pattern + ")");
  }
  // JIT is only a speed-up; the interpreter gives the same matches where it is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Pcre2Code(code);
}

std::string EscapeRegexLiteral(std::string_view s) {
  return "\\Q" + std::string(s) + "\\E";
}

// GPT-2's pattern, which ByteLevel(use_regex=true) applies.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

void SplitIsolated(const pcre2_code* regex, std::string_view text, std::vector<std::string_view>& out) {
  if (text.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex, nullptr);
  size_t last = 0;
  size_t offset = 0;
  std::vector<std::pair<size_t, size_t>> matches;
  while (offset <= text.size()) {
    // PCRE2 validates the whole subject on every call unless told not to; checking it once
    // keeps splitting linear in the text length.
    const uint32_t options = offset == 0 ? 0 : PCRE2_NO_UTF_CHECK;
    const int rc = pcre2_match(regex, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                               offset, options, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0];
    const size_t e = ov[1];
    if (e == s) {
      // Step over one whole character so matching resumes on a boundary.
      if (s >= text.size()) break;
      size_t next = s;
      utf8::DecodeAt(text, next);
      offset = next;
      continue;
    }
    matches.emplace_back(s, e);
    offset = e;
  }
  pcre2_match_data_free(md);
  for (const auto& [s, e] : matches) {
    if (last < s) out.push_back(text.substr(last, s - last));
    out.push_back(text.substr(s, e - s));
    last = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
}

Status LoadPreTokenizer(const Json& p, const std::string& field, std::vector<SplitStep>& steps,
                        bool& saw_byte_level) {
  if (p.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(p, field));
  if (saw_byte_level) {
    return Unimplemented("tokenizer.json: pre-tokenizer '" + type +
                         "' after ByteLevel is not supported");
  }
  const JsonFields f(p, kTokenizerJson, field + ".");
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(p, "pretokenizers", field));
    for (const Json& child : *children) {
      ROTE_RETURN_IF_ERROR(LoadPreTokenizer(child, field + ".pretokenizers[]", steps, saw_byte_level));
    }
    return OkStatus();
  }
  if (type == "Split") {
    std::string behavior;
    ROTE_RETURN_IF_ERROR(f.String("behavior", "", &behavior));
    if (behavior != "Isolated") {
      return Unimplemented("tokenizer.json: Split behavior '" + behavior +
                           "' is not supported (supported: Isolated)");
    }
    static const Json kNone;
    const Json* pattern = f.Find("pattern");
    const JsonFields pf(pattern == nullptr ? kNone : *pattern, kTokenizerJson, field + ".pattern.");
    std::string regex;
    if (pf.Find("Regex") != nullptr) {
      ROTE_RETURN_IF_ERROR(pf.String("Regex", "", &regex));
    } else if (pf.Find("String") != nullptr) {
      std::string literal;
      ROTE_RETURN_IF_ERROR(pf.String("String", "", &literal));
      regex = EscapeRegexLiteral(literal);
    } else {
      return InvalidArgument("tokenizer.json: Split pre-tokenizer without a Regex or String pattern");
    }
    ROTE_ASSIGN_OR_RETURN(Pcre2Code code, CompileRegex(regex));
    bool invert = false;
    ROTE_RETURN_IF_ERROR(f.Bool("invert", false, &invert));
    if (invert) {
      return Unimplemented("tokenizer.json: Split with invert=true is not supported");
    }
    SplitStep step;
    step.regex = std::move(code);
    steps.push_back(std::move(step));
    return OkStatus();
  }
  if (type == "ByteLevel") {
    saw_byte_level = true;
    SplitStep step;
    ROTE_RETURN_IF_ERROR(f.Bool("add_prefix_space", false, &step.add_prefix_space));
    bool use_regex = true;
    ROTE_RETURN_IF_ERROR(f.Bool("use_regex", true, &use_regex));
    if (use_regex) {
      ROTE_ASSIGN_OR_RETURN(Pcre2Code code, CompileRegex(std::string(kGpt2Pattern)));
      step.regex = std::move(code);
    }
    if (step.add_prefix_space || step.regex) steps.push_back(std::move(step));
    return OkStatus();
  }
  return Unimplemented("tokenizer.json: pre-tokenizer type '" + type +
                       "' is not supported (supported: Sequence, Split, ByteLevel)");
}

}  // namespace tokenizer_internal

using tokenizer_internal::SplitIsolated;
using tokenizer_internal::SplitStep;

void Tokenizer::Impl::PreTokenizeAndBpe(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::deque<std::string> prefixed;  // storage for pieces given a prefix space
  std::vector<std::string_view> pieces{text};
  for (const SplitStep& step : split_steps) {
    std::vector<std::string_view> next;
    for (std::string_view p : pieces) {
      if (step.add_prefix_space && !p.empty() && p.front() != ' ') {
        prefixed.push_back(" " + std::string(p));
        p = prefixed.back();
      }
      if (step.regex) {
        SplitIsolated(step.regex.get(), p, next);
      } else if (!p.empty()) {
        next.push_back(p);
      }
    }
    pieces = std::move(next);
  }
  for (std::string_view p : pieces) Bpe(p, out);
}

}  // namespace rote::inference
