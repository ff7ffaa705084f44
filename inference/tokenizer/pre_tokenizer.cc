// The pre-tokenizer: Split (a regex or a string, any delimiter behavior, inverted or not),
// ByteLevel's prefix space and GPT-2 split, Digits and Metaspace, applied in order before BPE
// runs on each piece.
#include <utf8proc.h>

#include <deque>

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

// GPT-2's pattern, which ByteLevel(use_regex=true) applies.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

StatusOr<SplitBehavior> ReadBehavior(const JsonFields& f) {
  std::string behavior;
  ROTE_RETURN_IF_ERROR(f.String("behavior", "", &behavior));
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "Removed") return SplitBehavior::kRemoved;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (behavior == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument("tokenizer.json: Split behavior '" + behavior +
                       "' is not supported (supported: Isolated, Removed, MergedWithPrevious, "
                       "MergedWithNext, Contiguous)");
}

// Rust's char::is_numeric: general categories Nd, Nl and No. utf8proc 2.8 has Unicode 15.0's
// categories; the Rust standard library tokenizers is built with has 17.0's, which add these.
bool NumericAddedAfter15(char32_t cp) {
  static constexpr char32_t kRanges[][2] = {
      {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11DE0, 0x11DE9}, {0x16130, 0x16139},
      {0x16D70, 0x16D79}, {0x16FF4, 0x16FF6}, {0x1CCF0, 0x1CCF9}, {0x1E5F1, 0x1E5FA}};
  for (const auto& r : kRanges) {
    if (cp >= r[0] && cp <= r[1]) return true;
  }
  return false;
}

bool IsNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO ||
         NumericAddedAfter15(cp);
}

}  // namespace

Status LoadPreTokenizer(const Json& p, const std::string& field, std::vector<PreTokenizerStep>& steps) {
  if (p.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(p, field));
  const JsonFields f(p, kTokenizerJson, field + ".");
  using Kind = PreTokenizerStep::Kind;
  PreTokenizerStep step;
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(p, "pretokenizers", field));
    for (const Json& child : *children) {
      ROTE_RETURN_IF_ERROR(LoadPreTokenizer(child, field + ".pretokenizers[]", steps));
    }
    return OkStatus();
  }
  if (type == "Split") {
    step.kind = Kind::kSplit;
    ROTE_ASSIGN_OR_RETURN(step.behavior, ReadBehavior(f));
    ROTE_ASSIGN_OR_RETURN(step.regex, CompilePatternNode(f.Find("pattern"), field + ".pattern"));
    ROTE_RETURN_IF_ERROR(f.Bool("invert", false, &step.invert));
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    ROTE_RETURN_IF_ERROR(f.Bool("add_prefix_space", false, &step.add_prefix_space));
    bool use_regex = true;
    ROTE_RETURN_IF_ERROR(f.Bool("use_regex", true, &use_regex));
    if (use_regex) {
      ROTE_ASSIGN_OR_RETURN(step.regex, CompileOnigRegex(kGpt2Pattern, field));
    }
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    ROTE_RETURN_IF_ERROR(f.Bool("individual_digits", false, &step.individual_digits));
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    ROTE_RETURN_IF_ERROR(OneCharField(f, "replacement", "\xE2\x96\x81", &step.replacement));
    std::string scheme;
    ROTE_RETURN_IF_ERROR(f.String("prepend_scheme", "always", &scheme));
    if (scheme == "always") {
      step.prepend = PreTokenizerStep::Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend = PreTokenizerStep::Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend = PreTokenizerStep::Prepend::kNever;
    } else {
      return f.Error("prepend_scheme", "must be always, first or never");
    }
    // Older files say add_prefix_space instead; false means never.
    bool add_prefix_space = true;
    ROTE_RETURN_IF_ERROR(f.Bool("add_prefix_space", true, &add_prefix_space));
    if (!add_prefix_space) {
      if (step.prepend != PreTokenizerStep::Prepend::kNever && f.Find("prepend_scheme") != nullptr) {
        return f.Error("add_prefix_space", "does not match prepend_scheme");
      }
      step.prepend = PreTokenizerStep::Prepend::kNever;
    }
    ROTE_RETURN_IF_ERROR(f.Bool("split", true, &step.split));
  } else {
    return InvalidArgument("tokenizer.json: pre-tokenizer type '" + type +
                         "' is not supported (supported: Sequence, Split, ByteLevel, Digits, Metaspace)");
  }
  steps.push_back(std::move(step));
  return OkStatus();
}

}  // namespace tokenizer_internal

using tokenizer_internal::PreTokenizerStep;

void Tokenizer::Impl::PreTokenizeAndBpe(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  using Kind = PreTokenizerStep::Kind;
  struct PieceText {
    std::string_view text;
    bool at_start;  // begins where the input begins
  };
  std::deque<std::string> storage;  // pieces a step rewrote
  // Scratch reused across calls (per thread): a long text has as many pieces as words, and
  // growing these afresh each time costs more than the splitting itself.
  thread_local std::vector<PieceText> pieces;
  thread_local std::vector<PieceText> next;
  thread_local std::vector<tokenizer_internal::Match> matches;
  thread_local std::vector<std::pair<size_t, size_t>> kept;
  pieces.assign(1, {text, at_start});
  auto split_into = [&](const PieceText& p, tokenizer_internal::SplitBehavior behavior) {
    tokenizer_internal::ApplySplitBehavior(matches, behavior, kept);
    for (const auto& [s, e] : kept) next.push_back({p.text.substr(s, e - s), p.at_start && s == 0});
  };
  for (const PreTokenizerStep& step : pre_tokenizer) {
    next.clear();
    for (PieceText p : pieces) {
      switch (step.kind) {
        case Kind::kSplit:
          tokenizer_internal::FindRegexMatches(step.regex.get(), p.text, matches);
          if (step.invert) {
            for (auto& m : matches) m.is_match = !m.is_match;
          }
          split_into(p, step.behavior);
          break;
        case Kind::kByteLevel:
          if (step.add_prefix_space && p.text.front() != ' ') {
            storage.push_back(" " + std::string(p.text));
            p.text = storage.back();
          }
          if (step.regex) {
            tokenizer_internal::FindRegexMatches(step.regex.get(), p.text, matches);
            split_into(p, tokenizer_internal::SplitBehavior::kIsolated);
          } else {
            next.push_back(p);
          }
          break;
        case Kind::kDigits:
          tokenizer_internal::FindCharMatches(p.text, tokenizer_internal::IsNumeric, matches);
          split_into(p, step.individual_digits ? tokenizer_internal::SplitBehavior::kIsolated
                                               : tokenizer_internal::SplitBehavior::kContiguous);
          break;
        case Kind::kMetaspace: {
          std::string s;
          s.reserve(p.text.size() + 3);
          for (char c : p.text) {
            if (c == ' ') {
              s += step.replacement;
            } else {
              s += c;
            }
          }
          const bool starts = s.compare(0, step.replacement.size(), step.replacement) == 0;
          if (!starts && (step.prepend == PreTokenizerStep::Prepend::kAlways ||
                          (step.prepend == PreTokenizerStep::Prepend::kFirst && p.at_start))) {
            s = step.replacement + s;
          }
          storage.push_back(std::move(s));
          p.text = storage.back();
          if (step.split) {
            const std::string& rep = step.replacement;
            matches.clear();
            size_t last = 0;
            size_t pos = 0;
            while ((pos = p.text.find(rep, pos)) != std::string_view::npos) {
              if (last < pos) matches.push_back({last, pos, false});
              matches.push_back({pos, pos + rep.size(), true});
              pos += rep.size();
              last = pos;
            }
            if (last < p.text.size()) matches.push_back({last, p.text.size(), false});
            split_into(p, tokenizer_internal::SplitBehavior::kMergedWithNext);
          } else {
            next.push_back(p);
          }
          break;
        }
      }
    }
    std::swap(pieces, next);
  }
  for (const PieceText& p : pieces) Bpe(p.text, out);
}

}  // namespace rote::inference
