// A chat template, then (after fuzz_util.h's separator) a JSON object of variables. Parsing and
// rendering must answer with a status, never crash, hang or allocate by a number in the input;
// errors are INVALID_ARGUMENT (or RESOURCE_EXHAUSTED) and name the template line; a render stays
// within the output limit. Limits are lowered so that each input runs in milliseconds.
#include <cstdint>
#include <string>

#include "bench/fuzz/fuzz_util.h"
#include "inference/tokenizer/jinja/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::inference;
  std::vector<std::string_view> parts = rote::fuzz::SplitParts(data, size, 2);
  jinja::Limits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_items = 1 << 14;
  limits.max_work = 200'000;
  limits.max_depth = 64;
  StatusOr<jinja::Template> t = jinja::Template::Parse(parts[0], limits);
  if (!t.ok()) {
    ROTE_FUZZ_CHECK(t.status().code() == StatusCode::kInvalidArgument);
    ROTE_FUZZ_CHECK(t.status().message().rfind("chat template line ", 0) == 0);
    return 0;
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
  if (context.is_discarded() || !context.is_object()) {
    context = {{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "é"}}}},
               {"tools", nullptr}, {"add_generation_prompt", true}, {"bos_token", "<s>"}};
  }
  StatusOr<std::string> text = t->Render(context);
  if (text.ok()) {
    ROTE_FUZZ_CHECK(text->size() <= limits.max_output_bytes);
  } else {
    ROTE_FUZZ_CHECK(text.status().code() == StatusCode::kInvalidArgument ||
                    text.status().code() == StatusCode::kResourceExhausted);
  }
  return 0;
}
