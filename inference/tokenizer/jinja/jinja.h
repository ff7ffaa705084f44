// A Jinja interpreter for chat templates: the subset of Jinja2 that published Hugging Face chat
// templates use, rendered the way transformers' apply_chat_template renders them (trim_blocks,
// lstrip_blocks, the loop-controls extension, an immutable sandbox, transformers' tojson,
// raise_exception and strftime_now). docs/tokenizer.md "Chat templates" lists what is supported.
//
// Templates come from model directories a user downloaded, so they are untrusted input: parsing
// and rendering are bounded by Limits (template size, nesting depth, output and value sizes, and
// the total work), and every failure is a Status naming the template line, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>  // header-only; ordered_json keeps the key order tojson prints

#include "inference/status.h"

namespace rote::inference::jinja {

struct Limits {
  size_t max_template_bytes = 1 << 20;
  // The rendered text, and also the largest string or list a template may build.
  size_t max_output_bytes = 32 << 20;
  size_t max_items = 1 << 20;  // elements of one list or dict
  // Nesting of parsed constructs (parentheses, blocks) and of macro calls.
  int max_depth = 200;
  // Evaluation steps plus bytes built / 64: bounds the time of any render to seconds.
  uint64_t max_work = 20'000'000;
};

// The calendar day strftime_now formats. Rendering never reads the clock, so the same request
// renders the same text everywhere; the default is the date Llama 3.1's template falls back to.
struct Date {
  int year = 2024;
  int month = 7;  // 1..12
  int day = 26;   // 1..31
};

struct Node;  // the parsed tree (jinja_internal.h)

class Template {
 public:
  // INVALID_ARGUMENT naming the line for a syntax error or a template over the limits.
  static StatusOr<Template> Parse(std::string_view source, const Limits& limits = {});

  // Renders with `context` (a JSON object: its keys are the template's variables).
  // INVALID_ARGUMENT for an error the template raises (raise_exception), a type error or an
  // exceeded limit, with the template line.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context, const Date& date = {}) const;

 private:
  std::shared_ptr<const Node> root_;
  Limits limits_;
};

}  // namespace rote::inference::jinja
