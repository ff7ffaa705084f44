// The Jinja interpreter against transformers' apply_chat_template on published chat templates
// (tests/fixtures/chat_templates, references from tools/make_chat_fixtures.py), the Tokenizer's
// chat API over it, and the limits that keep an untrusted template from crashing or hanging.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "inference/tokenizer/chat_format.h"
#include "inference/tokenizer/jinja/jinja.h"
#include "inference/tokenizer/tokenizer.h"

namespace rote::inference {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;

std::string FixturePath(const std::string& rel) { return std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + rel; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

OJson ReadJson(const std::string& path) { return OJson::parse(ReadText(path)); }

StatusOr<std::string> Render(std::string_view tpl, const OJson& context = OJson::object(), jinja::Limits limits = {}) {
  StatusOr<jinja::Template> t = jinja::Template::Parse(tpl, limits);
  if (!t.ok()) return t.status();
  return t->Render(context);
}

std::string RenderOk(std::string_view tpl, const OJson& context = OJson::object()) {
  StatusOr<std::string> s = Render(tpl, context);
  EXPECT_TRUE(s.ok()) << tpl << ": " << s.status().ToString();
  return s.ok() ? *s : "";
}

TEST(ChatTemplateFixtures, EveryTemplateAndConversationRendersAsTransformers) {
  const std::string dir = FixturePath("chat_templates");
  const OJson conversations = ReadJson(dir + "/conversations.json");
  const OJson expected = ReadJson(dir + "/expected.json");
  // The committed references are transformers' own rendering (tools/make_chat_fixtures.py).
  EXPECT_EQ(expected["engine"].get<std::string>().rfind("transformers ", 0), 0u);
  ASSERT_GE(expected["templates"].size(), 10u);
  int texts = 0, errors = 0;
  for (const auto& [name, results] : expected["templates"].items()) {
    const OJson fixture = ReadJson(dir + "/" + name + ".json");
    ChatFormat format = ChatFormatFor(ChatFamily::kQwen2, fixture["chat_template"].get<std::string>());
    ASSERT_TRUE(format.jinja_template) << name << ": " << format.template_error;
    for (const auto& [key, value] : fixture["special_tokens"].items()) format.special_tokens[key] = value.get<std::string>();
    for (const OJson& conv : conversations) {
      const std::string cname = conv["name"].get<std::string>();
      ASSERT_TRUE(results.contains(cname)) << name << "/" << cname;
      const OJson& want = results[cname];
      const OJson tools = conv.contains("tools") ? conv["tools"] : OJson(nullptr);
      const OJson extra = conv.contains("extra") ? conv["extra"] : OJson::object();
      StatusOr<std::string> got = RenderChat(format, conv["messages"], tools, conv["add_generation_prompt"].get<bool>(), extra);
      if (want.contains("text")) {
        ++texts;
        EXPECT_TRUE(got.ok()) << name << "/" << cname << ": " << got.status().ToString();
        if (!got.ok()) continue;
        EXPECT_EQ(*got, want["text"].get<std::string>()) << name << "/" << cname;
      } else {
        ++errors;
        EXPECT_FALSE(got.ok()) << name << "/" << cname << " should fail like " << want["error"] << ", rendered:\n" << *got;
        if (got.ok()) continue;
        EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
        EXPECT_THAT(got.status().message(), HasSubstr("chat template line "));
        if (want["raised"].get<bool>()) {
          // "TemplateError: <message>": the template's own message comes through.
          const std::string msg = want["error"].get<std::string>().substr(std::string("TemplateError: ").size());
          EXPECT_THAT(got.status().message(), HasSubstr("raise_exception: " + msg)) << name << "/" << cname;
        }
      }
    }
  }
  EXPECT_GT(texts, 180);
  EXPECT_GT(errors, 5);
}

// ---- The Tokenizer's chat API on the model fixtures ----

StatusOr<Tokenizer> LoadFamily(const std::string& family) { return Tokenizer::Load(FixturePath(family)); }

TEST(TokenizerChatTemplate, FixtureDirectoriesRenderThroughTheirTemplates) {
  for (const char* family : {"qwen2", "llama3", "qwen3"}) {
    StatusOr<Tokenizer> t = LoadFamily(family);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE(t->has_chat_template()) << family;
  }
}

TEST(TokenizerChatTemplate, ToolsAndToolCallsReachTheTemplate) {
  StatusOr<Tokenizer> t = LoadFamily("qwen3");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Tokenizer::ChatRequest req;
  req.messages_json = R"([{"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "content": "sunny"}])";
  req.tools_json = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  StatusOr<std::string> text = t->RenderChat(req);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_THAT(*text, HasSubstr("# Tools\n\nYou may call one or more functions"));
  EXPECT_THAT(*text, HasSubstr(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})"));
  EXPECT_THAT(*text, HasSubstr("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_THAT(*text, HasSubstr("<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"));

  req.extra_json = R"({"enable_thinking": false})";
  req.messages_json = R"([{"role": "user", "content": "hi"}])";
  req.tools_json.clear();
  text = t->RenderChat(req);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(TokenizerChatTemplate, MalformedRequestsAreInvalidArgument) {
  StatusOr<Tokenizer> t = LoadFamily("qwen3");
  ASSERT_TRUE(t.ok());
  for (auto [messages, tools, extra] : {std::tuple<const char*, const char*, const char*>{"[{", "", ""},
                                        {"{}", "", ""}, {"[]", "{}", ""}, {"[]", "", "[]"}}) {
    Tokenizer::ChatRequest req;
    req.messages_json = messages;
    req.tools_json = tools;
    req.extra_json = extra;
    StatusOr<std::string> text = t->RenderChat(req);
    ASSERT_FALSE(text.ok()) << messages << tools << extra;
    EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(TokenizerChatTemplate, RaisedErrorsAreInvalidArgumentWithTheTemplatesMessage) {
  const OJson gemma = ReadJson(FixturePath("chat_templates/gemma3.json"));
  Json config = {{"chat_template", gemma["chat_template"].get<std::string>()}, {"bos_token", "<bos>"}};
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(FixturePath("qwen2/tokenizer.json")), config.dump(),
                                              ReadText(FixturePath("qwen2/config.json")), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Tokenizer::ChatRequest req;
  req.messages = {{"user", "one"}, {"user", "two"}};
  StatusOr<std::string> text = t->RenderChat(req);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("raise_exception: Conversation roles must alternate user/assistant"));
  EXPECT_THAT(text.status().message(), HasSubstr("chat template line 19"));
  // ApplyChatTemplate cannot report; it falls back to the built-in format.
  EXPECT_EQ(t->ApplyChatTemplate(req.messages, true),
            "<|im_start|>user\none<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TokenizerChatTemplate, WithoutATemplateTheBuiltInFormatIsTheFallback) {
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(FixturePath("qwen2/tokenizer.json")), "{}",
                                              ReadText(FixturePath("qwen2/config.json")), "");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has_chat_template());
  Tokenizer::ChatRequest req;
  req.messages = {{"user", "hi"}};
  StatusOr<std::string> text = t->RenderChat(req);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  req.tools_json = R"([{"type": "function"}])";
  EXPECT_EQ(t->RenderChat(req).status().code(), StatusCode::kFailedPrecondition);
}

TEST(TokenizerChatTemplate, ATemplateThatDoesNotParseIsReportedWithItsLine) {
  Json config = {{"chat_template", "line one\n{% for m in messages %}\n{{ m.content }\n{% endfor %}"}};
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(FixturePath("qwen2/tokenizer.json")), config.dump(),
                                              ReadText(FixturePath("qwen2/config.json")), "");
  ASSERT_TRUE(t.ok());
  Tokenizer::ChatRequest req;
  req.messages = {{"user", "hi"}};
  StatusOr<std::string> text = t->RenderChat(req);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("chat template line 3"));
}

TEST(TokenizerChatTemplate, StrftimeNowFormatsTheCallersDateNeverTheClock) {
  const OJson llama = ReadJson(FixturePath("chat_templates/llama3_2.json"));
  Json config = {{"chat_template", llama["chat_template"].get<std::string>()}, {"bos_token", "<|begin_of_text|>"}};
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(FixturePath("llama3/tokenizer.json")), config.dump(),
                                              ReadText(FixturePath("llama3/config.json")), "");
  ASSERT_TRUE(t.ok());
  Tokenizer::ChatRequest req;
  req.messages = {{"user", "hi"}};
  StatusOr<std::string> text = t->RenderChat(req);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_THAT(*text, HasSubstr("Today Date: 26 Jul 2024\n"));
  req.year = 2025;
  req.month = 2;
  req.day = 3;
  text = t->RenderChat(req);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("Today Date: 03 Feb 2025\n"));
  req.month = 13;
  EXPECT_EQ(t->RenderChat(req).status().code(), StatusCode::kInvalidArgument);
}

// ---- Semantics that published templates rely on ----

TEST(Jinja, PythonSemantics) {
  EXPECT_EQ(RenderOk("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': 1.0} }} {{ (1,) }}"),
            "None True [1, 'a', None] {'k': 1.0} (1,)");
  EXPECT_EQ(RenderOk("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 62 }} {{ 1e16 }} {{ 0.1 }} {{ 1.5e-5 }}"),
            "-4 2 3.5 4611686018427387904 1e+16 0.1 1.5e-05");
  EXPECT_EQ(RenderOk("{{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ 'héllo' | length }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][5] }}|"),
            "é olléh 5 3 |");
  EXPECT_EQ(RenderOk("{{ x.y is defined }} {{ none.y is defined }} {{ x is defined }}", {{"x", {{"z", 1}}}}),
            "False False True");
  EXPECT_EQ(RenderOk("{{ '\"it\\'s\"' }} {{ [\"it's\"] }}"), "\"it's\" [\"it's\"]");
  EXPECT_EQ(RenderOk("{{ {'a': 'é', 'b': [1, 2.5, none, true]} | tojson }}|{{ {'a': 1} | tojson(indent=2) }}"),
            "{\"a\": \"é\", \"b\": [1, 2.5, null, true]}|{\n  \"a\": 1\n}");
  EXPECT_EQ(RenderOk("{{ '  a b  '.split() }} {{ 'a,b'.split(',') }} {{ 'xxhixx'.strip('x') }} {{ 'Hi'.startswith(('a', 'H')) }}"),
            "['a', 'b'] ['a', 'b'] hi True");
}

// Values from CPython 3.11: full case mappings, the final sigma, titlecase, Python's digit and
// numeric classes, and re's \w (no marks) for wordcount.
TEST(Jinja, CaseMappingsAndClassesArePythons) {
  EXPECT_EQ(RenderOk("{{ 'straße ﬁsh ŉ'.upper() }}|{{ 'straße' | upper }}|{{ 'İx'.lower() }}|{{ 'ᾳ'.upper() }}"),
            "STRASSE FISH ʼN|STRASSE|i̇x|ΑΙ");
  EXPECT_EQ(RenderOk("{{ 'ΟΔΥΣΣΕΥΣ. ΣΑΣ Σ AΣ\u0301 AΣb'.lower() }}|{{ 'AΣ' | lower }}|{{ 'ΣΑΣ'.capitalize() }}"),
            "οδυσσευς. σας σ aς\u0301 aσb|aς|Σας");
  EXPECT_EQ(RenderOk("{{ 'ǆungla ßa ﬁsh ⓐⓐ აა'.title() }}|{{ 'ǆx'.capitalize() }}|{{ 'ﬁsh-ΣΣ ǆx' | title }}"),
            "ǅungla Ssa Fish Ⓐⓐ აა|ǅx|FIsh-Σσ Ǆx");
  EXPECT_EQ(RenderOk("{{ 'ǅ'.islower() }} {{ 'ǅ'.isupper() }} {{ 'ªb'.islower() }} {{ 'ⅫⒶ'.isupper() }} {{ 'ß' is lower }}"),
            "False False True True True");
  EXPECT_EQ(RenderOk("{{ '²①'.isdigit() }} {{ '²'.isdecimal() }} {{ '三½Ⅻ'.isnumeric() }} {{ '三'.isdigit() }} "
                     "{{ 'a\u0301'.isalpha() }} {{ 'a三'.isalnum() }}"),
            "True False True False False True");
  EXPECT_EQ(RenderOk("{{ 'ab\u0301cd x_y 三 ‿ z' | wordcount }}|{{ none | map('upper') | list }}|{{ none | select | list }}"),
            "5|[]|[]");
  EXPECT_EQ(RenderOk("{{ ['b', 'A', 'ẞ', 'ss'] | sort | join(',') }}"), "A,b,ss,ẞ");
}

TEST(Jinja, ComparisonsChainAndRoundIsPythons) {
  EXPECT_EQ(RenderOk("{{ 1 < 3 > 2 }} {{ 3 > 2 > 1 }} {{ 1 != 2 != 1 }} {{ 1 < 2 < 1 }}"), "True True True False");
  EXPECT_EQ(RenderOk("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 10 | round }} {{ 1.5 | round(0, 'floor') }}"),
            "2.0 4.0 2.67 10 1.0");
  EXPECT_EQ(RenderOk("{% set l = [] %}{{ l.append is defined }}"), "False");
}

TEST(Jinja, WhitespaceControlAsTransformersConfiguresIt) {
  // Line breaks are normalized to \n first, as Jinja's lexer does.
  EXPECT_EQ(RenderOk("{% if true %}\r\nwin\r\n{% endif %}\r\n"), "win\n");
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before it.
  EXPECT_EQ(RenderOk("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(RenderOk("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(RenderOk("{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}"), "12");
  EXPECT_EQ(RenderOk("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(RenderOk("{# comment #}\n{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(Jinja, StatementsLoopsMacrosNamespaces) {
  EXPECT_EQ(RenderOk("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% if i is odd %}{% continue %}{% endif %}"
                     "{% set ns.n = ns.n + i %}{% if i > 3 %}{% break %}{% endif %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(RenderOk("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(RenderOk("{% for x in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.cycle('+', '-') }}{% endfor %}"),
            "12True+21False-30False+");
  EXPECT_EQ(RenderOk("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ varargs | length }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m(1, 2, 3) }}"),
            "1B0120121");
  EXPECT_EQ(RenderOk("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}"), "[in]");
  EXPECT_EQ(RenderOk("{% set x %}  Block {% endset %}{{ x | trim | upper }}{% filter lower %}ABC{% endfilter %}"), "BLOCKabc");
  EXPECT_EQ(RenderOk("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(RenderOk("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(Jinja, ErrorsNameTheLine) {
  StatusOr<std::string> s = Render("one\ntwo\n{{ raise_exception('bad role') }}");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "chat template line 3: raise_exception: bad role");
  s = Render("{{ undefined_thing.attr }}");
  EXPECT_THAT(s.status().message(), HasSubstr("'undefined_thing' is undefined"));
  s = Render("{{ 'a' + 1 }}");
  EXPECT_THAT(s.status().message(), HasSubstr("unsupported operand"));
  s = Render("{% if %}");
  EXPECT_FALSE(s.ok());
  s = Render("{% for x in y %}");
  EXPECT_THAT(s.status().message(), HasSubstr("endfor"));
  s = Render("{{ [1].append(2) }}");
  EXPECT_THAT(s.status().message(), HasSubstr("unsafe"));
}

// ---- Attacks: an untrusted template must end quickly with an error, never crash or hang ----

void ExpectRejectedQuickly(const std::string& tpl, const std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> s = Render(tpl);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok()) << tpl.substr(0, 80);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
  EXPECT_THAT(s.status().message(), HasSubstr("chat template line "));
  EXPECT_THAT(s.status().message(), HasSubstr(why));
  EXPECT_LT(secs, 20.0) << tpl.substr(0, 80);
}

TEST(JinjaLimits, DeepNesting) {
  ExpectRejectedQuickly("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nested too deeply");
  ExpectRejectedQuickly("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}", "nested too deeply");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  ExpectRejectedQuickly(ifs, "nested too deeply");
  ExpectRejectedQuickly("{{ " + std::string(50000, '-') + "1 }}", "nested too deeply");
  std::string nots;
  for (int i = 0; i < 50000; ++i) nots += "not ";
  ExpectRejectedQuickly("{{ " + nots + "1 }}", "nested too deeply");
}

TEST(JinjaLimits, HugeRangeAndLoops) {
  ExpectRejectedQuickly("{% for i in range(1000000000000) %}x{% endfor %}", "exceeds the limit");
  ExpectRejectedQuickly("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", "work limit");
  ExpectRejectedQuickly("{{ range(10**18) | length }}", "exceeds the limit");
}

TEST(JinjaLimits, RecursiveMacro) {
  ExpectRejectedQuickly("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested too deeply");
  ExpectRejectedQuickly("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}\n{{ f(0) }}", "nested too deeply");
}

TEST(JinjaLimits, DeeplyNestedValues) {
  // Printing, comparing and freeing values recurse, so values nest only so deep.
  ExpectRejectedQuickly("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                        "value nested too deeply");
  ExpectRejectedQuickly("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}",
                        "value nested too deeply");
  OJson context = OJson::object();
  context["messages"] = OJson::parse(std::string(5000, '[') + std::string(5000, ']'));
  StatusOr<std::string> s = Render("{{ messages | length }}", context);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("value nested too deeply"));
}

TEST(JinjaLimits, HugeStrings) {
  ExpectRejectedQuickly("{{ 'x' * 1000000000000 }}", "exceeds the limit");
  ExpectRejectedQuickly("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                        "exceeds the limit");
  ExpectRejectedQuickly("{% for i in range(100000) %}{{ 'y' * 100000 }}{% endfor %}", "output exceeds");
  ExpectRejectedQuickly("{{ [1] * 100000000 }}", "exceeds the limit");
  ExpectRejectedQuickly("{{ 2 ** 100000 }}", "overflow");
}

TEST(JinjaLimits, TemplateSizeAndMalformedInput) {
  jinja::Limits small;
  small.max_template_bytes = 1000;
  StatusOr<std::string> s = Render(std::string(2000, 'a'), OJson::object(), small);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("exceeds the limit"));
  for (const char* bad : {"{{", "{%", "{#", "{{ 'abc }}", "{% for %}", "{% endfor %}", "{{ a[ }}", "{{ 1 + }}",
                          "{% set %}", "{% macro %}", "{{ '\\x' }}", "{% raw %}", "\xff\xfe", "{{ 99999999999999999999 }}",
                          "{{ a.b.c( }}", "{% if x %}{% elif %}{% endif %}", "{% break %}", "{{ {1: } }}"}) {
    s = Render(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace rote::inference

namespace rote::inference {
namespace {

// A directory's chat_template.jinja wins over tokenizer_config.json's chat_template, as in
// transformers, and the template sees the special tokens by name.
TEST(ChatTemplateFile, WinsOverTheConfigAndSeesTheSpecialTokens) {
  const std::string dir = ::testing::TempDir() + "/rote_chat_template_file";
  std::filesystem::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"})
    std::filesystem::copy_file(FixturePath(std::string("llama3/") + f), dir + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/chat_template.jinja")
      << "[{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}]"
         "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}";
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  Tokenizer::ChatRequest chat;
  chat.messages = {{"user", "hi"}};
  auto text = tok->RenderChat(chat);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "[<|begin_of_text|>|<|eot_id|>|False]user=hi;");
  // Without the file, the config's own template renders again.
  std::filesystem::remove(dir + "/chat_template.jinja");
  auto plain = Tokenizer::Load(dir);
  ASSERT_TRUE(plain.ok());
  auto llama = plain->RenderChat(chat);
  ASSERT_TRUE(llama.ok());
  EXPECT_THAT(*llama, HasSubstr("<|start_header_id|>user<|end_header_id|>"));
}

}  // namespace
}  // namespace rote::inference
