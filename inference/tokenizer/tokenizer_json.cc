// Loading: tokenizer.json and the config files beside it into a Tokenizer::Impl. Every field is
// checked with a message naming the file and the field; each component's own file (normalizer,
// pre-tokenizer, BPE, added tokens, decoder) reads its part.
#include <algorithm>
#include <limits>

#include "inference/model/model_files.h"
#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

StatusOr<std::string> ComponentType(const Json& node, const std::string& field) {
  if (!node.is_object()) return InvalidArgument(std::string(kTokenizerJson) + ": field '" + field + "' must be an object");
  std::string type;
  ROTE_RETURN_IF_ERROR(JsonFields(node, kTokenizerJson, field + ".").String("type", "", &type));
  return type;
}

Status OneCharField(const JsonFields& f, const char* key, const std::string& fallback, std::string* out) {
  ROTE_RETURN_IF_ERROR(f.String(key, fallback, out));
  size_t one = 0;
  if (out->empty() || !utf8::IsValid(*out)) return f.Error(key, "must be one character");
  utf8::DecodeAt(*out, one);
  if (one != out->size()) return f.Error(key, "must be one character");
  return OkStatus();
}

StatusOr<const Json*> Children(const Json& node, const char* key, const std::string& field) {
  const Json* list = JsonFields(node, kTokenizerJson).Find(key);
  if (list == nullptr || !list->is_array()) {
    return InvalidArgument(std::string(kTokenizerJson) + ": field '" + field + "." + key + "' must be a list");
  }
  return list;
}

namespace {

// tokenizer_config's bos_token / eos_token: a string, an AddedToken object, or absent / null.
StatusOr<std::optional<std::string>> TokenField(const Json& config, const char* key) {
  const JsonFields f(config, "tokenizer_config.json");
  const Json* v = f.Find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    if (auto c = v->find("content"); c != v->end() && c->is_string()) {
      return std::optional<std::string>(c->get<std::string>());
    }
  }
  return f.Error(key, "must be a string, an object with a string 'content', or null");
}

// tokenizer_config's chat_template: a string, or a list of {"name", "template"} of which the one
// named "default" applies (transformers' form for several templates); absent or null: none.
StatusOr<std::string> ChatTemplateField(const Json& config) {
  const JsonFields f(config, "tokenizer_config.json");
  const Json* v = f.Find("chat_template");
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_array()) {
    std::string chosen;
    for (const Json& entry : *v) {
      const JsonFields e(entry, "tokenizer_config.json", "chat_template[].");
      std::string name, text;
      if (!entry.is_object()) return f.Error("chat_template", "must hold objects with a name and a template");
      ROTE_RETURN_IF_ERROR(e.String("name", "", &name));
      ROTE_RETURN_IF_ERROR(e.String("template", "", &text));
      if (name == "default") chosen = std::move(text);
    }
    return chosen;
  }
  return f.Error("chat_template", "must be a string, a list of named templates, or null");
}

StatusOr<ChatFamily> FamilyFor(const Json& config, const Tokenizer::Impl& impl) {
  std::string model_type;
  ROTE_RETURN_IF_ERROR(JsonFields(config, "config.json").String("model_type", "", &model_type));
  if (model_type == "qwen2") return ChatFamily::kQwen2;
  if (model_type == "llama") return ChatFamily::kLlama3;
  if (model_type == "qwen3" || model_type == "qwen3_moe") return ChatFamily::kQwen3;
  // Any other model_type: tokenization does not depend on it, and chats go through the model's
  // own template; whether the model itself is supported is the model loader's question
  // (ParseModelConfig, INVALID_ARGUMENT naming the supported families). The built-in format,
  // a fallback for a directory without a template, is chosen by the added tokens.
  // No config.json (or a family without a built-in format): the added tokens tell the format.
  if (impl.token_to_id.count("<|start_header_id|>")) return ChatFamily::kLlama3;
  if (impl.token_to_id.count("<think>")) return ChatFamily::kQwen3;
  return ChatFamily::kQwen2;
}

// The BPE model's options (unk_token is resolved once the vocabulary is read).
Status CheckBpeModel(const JsonFields& mf, Tokenizer::Impl& impl, std::string* unk_token) {
  std::string model_type;
  ROTE_RETURN_IF_ERROR(mf.String("type", "BPE", &model_type));
  if (model_type != "BPE") {
    return InvalidArgument("tokenizer.json: model type '" + model_type +
                         "' is not supported (supported: BPE)");
  }
  ROTE_RETURN_IF_ERROR(mf.Bool("byte_fallback", false, &impl.byte_fallback));
  ROTE_RETURN_IF_ERROR(mf.Bool("fuse_unk", false, &impl.fuse_unk));
  ROTE_RETURN_IF_ERROR(mf.String("unk_token", "", unk_token));
  double dropout = 0.0;
  ROTE_RETURN_IF_ERROR(mf.Number("dropout", 0.0, 0.0, /*open_lo=*/false, 1.0, &dropout));
  if (dropout != 0.0) {
    return InvalidArgument("tokenizer.json: BPE dropout is not supported (it is random)");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string value;
    ROTE_RETURN_IF_ERROR(mf.String(affix, "", &value));
    if (!value.empty()) {
      return InvalidArgument(std::string("tokenizer.json: BPE ") + affix + " is not supported");
    }
  }
  ROTE_RETURN_IF_ERROR(mf.Bool("ignore_merges", false, &impl.ignore_merges));
  return OkStatus();
}

// The vocabulary's token -> id entries, each id below `entries`; fills vocab_token (id -> text)
// and raises *max_id.
Status LoadVocab(const Json& vocab, int64_t entries, Tokenizer::Impl& impl,
                 std::vector<const std::string*>& vocab_token, int32_t* max_id) {
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const Json& v = it.value();
    const bool in_range = v.is_number_unsigned() && v.get<uint64_t>() < static_cast<uint64_t>(entries);
    if (!in_range) {
      return InvalidArgument("tokenizer.json: field 'model.vocab[\"" + it.key() + "\"]' = " + v.dump() +
                             " is out of range [0, " + std::to_string(entries - 1) +
                             "] (ids index the vocabulary and the added tokens)");
    }
    const auto id = static_cast<int32_t>(v.get<uint64_t>());
    if (vocab_token[id] != nullptr) {
      return InvalidArgument("tokenizer.json: field 'model.vocab' gives id " + std::to_string(id) + " to both '" +
                             *vocab_token[id] + "' and '" + it.key() + "'");
    }
    vocab_token[id] = &it.key();
    impl.token_to_id[it.key()] = id;
    *max_id = std::max(*max_id, id);
  }
  return OkStatus();
}

// tokenizer.json's added_tokens, checked against each other and the vocabulary; raises *max_id.
Status LoadAddedTokens(const Json& added_list, int64_t entries, const Tokenizer::Impl& impl,
                       const std::vector<const std::string*>& vocab_token, std::vector<AddedToken>* added,
                       int32_t* max_id) {
  std::vector<uint8_t> added_id_seen(static_cast<size_t>(entries), 0);
  StringMap<int32_t> added_by_content;
  for (size_t i = 0; i < added_list.size(); ++i) {
    AddedToken t;
    ROTE_RETURN_IF_ERROR(ReadAddedToken(added_list[i], i, entries, &t));
    const std::string field = "tokenizer.json: field 'added_tokens[" + std::to_string(i) + "]";
    const std::string id = std::to_string(t.id);
    if (added_id_seen[t.id]) return InvalidArgument(field + ".id' = " + id + " is given to another added token too");
    added_id_seen[t.id] = 1;
    // An added token may repeat a vocabulary entry (GPT-2 style), not take another token's id.
    if (vocab_token[t.id] != nullptr && *vocab_token[t.id] != t.content) {
      return InvalidArgument(field + ".id' = " + id + " belongs to vocabulary token '" + *vocab_token[t.id] +
                             "', not '" + t.content + "'");
    }
    if (auto in_vocab = impl.token_to_id.find(t.content);
        in_vocab != impl.token_to_id.end() && in_vocab->second != t.id) {
      return InvalidArgument(field + ".content' = '" + t.content + "' is vocabulary token " +
                             std::to_string(in_vocab->second) + ", not " + id);
    }
    if (!added_by_content.emplace(t.content, t.id).second) {
      return InvalidArgument(field + ".content' = '" + t.content + "' appears twice");
    }
    *max_id = std::max(*max_id, t.id);
    added->push_back(std::move(t));
  }
  return OkStatus();
}

// The per-id tables (token text, bytes, known, in vocabulary, special) and the byte -> id
// tables for `n` ids.
void BuildIdTables(const Json& vocab, size_t n, Tokenizer::Impl& impl) {
  impl.id_bytes.assign(n, std::string());
  impl.id_token.assign(n, std::string());
  impl.id_known.assign(n, 0);
  impl.id_in_vocab.assign(n, 0);
  impl.id_special.assign(n, 0);
  impl.byte_id.fill(-1);
  impl.byte_fallback_id.fill(-1);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<int32_t>(it.value().get<uint64_t>());
    impl.id_known[id] = 1;
    impl.id_in_vocab[id] = 1;
    impl.id_token[id] = it.key();
    if (const int b = ByteFallbackValue(it.key()); b >= 0 && it.key()[3] != '+' && impl.byte_fallback_id[b] < 0) {
      // merge_word looks up format!("<{b:#04X}>"): upper-case digits.
      static constexpr char kHex[] = "0123456789ABCDEF";
      const std::string canonical = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      if (canonical == it.key()) impl.byte_fallback_id[b] = id;
    }
    if (impl.byte_level) {
      bool in_alphabet = false;
      std::string bytes = ByteLevelDecodeToken(it.key(), &in_alphabet);
      // Only tokens written wholly in the alphabet can come out of byte-level BPE.
      if (in_alphabet) {
        if (bytes.size() == 1) impl.byte_id[static_cast<unsigned char>(bytes[0])] = id;
        impl.bytes_to_id.emplace(bytes, id);
      }
    }
  }
}

// The bytes each id stands for alone, once the added tokens are in the tables.
void BuildIdBytes(Tokenizer::Impl& impl) {
  for (size_t id = 0; id < impl.id_token.size(); ++id) {
    if (!impl.id_known[id]) continue;
    const std::string& token = impl.id_token[id];
    if (impl.byte_level_decoder) {
      impl.id_bytes[id] = ByteLevelDecodeToken(token);
    } else if (impl.decoder.empty()) {
      impl.id_bytes[id] = token;
    } else {
      impl.id_bytes[id] = DecodeTokenAlone(impl.decoder, token);
    }
  }
}

// Added tokens join the id tables and the matching pass they belong to.
void InstallAddedTokens(std::vector<AddedToken>& added, Tokenizer::Impl& impl) {
  for (AddedToken& t : added) {
    impl.id_token[t.id] = t.content;
    impl.id_known[t.id] = 1;
    impl.id_special[t.id] = t.special ? 1 : 0;
    impl.token_to_id[t.content] = t.id;
    if (t.normalized) {
      // Matched after normalization, so match the normalized form.
      t.content = Normalize(impl.normalizer, t.content);
      if (!t.content.empty()) impl.normalized_added.Add(t);
    } else {
      impl.raw_added.Add(t);
    }
  }
}

// Special ids, the chat format and the stop tokens, from tokenizer_config.json (tc), config.json
// (cj) and generation_config.json (gc).
Status LoadSpecialIds(const Json& tc, const Json& cj, const Json& gc, Tokenizer::Impl& impl) {
  auto id_of = [&](const std::optional<std::string>& token) -> std::optional<int32_t> {
    if (!token) return std::nullopt;
    auto it = impl.token_to_id.find(*token);
    if (it == impl.token_to_id.end()) return std::nullopt;
    return it->second;
  };
  ROTE_ASSIGN_OR_RETURN(const std::optional<std::string> bos_token, TokenField(tc, "bos_token"));
  ROTE_ASSIGN_OR_RETURN(const std::optional<std::string> eos_token, TokenField(tc, "eos_token"));
  impl.bos = id_of(bos_token);
  impl.eos = id_of(eos_token);

  ROTE_ASSIGN_OR_RETURN(ChatFamily family, FamilyFor(cj, impl));
  ROTE_ASSIGN_OR_RETURN(const std::string chat_template, ChatTemplateField(tc));
  impl.chat = ChatFormatFor(family, chat_template);
  if (family == ChatFamily::kLlama3) {
    if (!impl.bos) impl.bos = id_of(std::string("<|begin_of_text|>"));
    if (bos_token) impl.chat.bos_text = *bos_token;
  }
  // The special tokens transformers passes to the template by name (bos_token, eos_token, ...).
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    ROTE_ASSIGN_OR_RETURN(const std::optional<std::string> token, TokenField(tc, key));
    if (token) impl.chat.special_tokens[key] = *token;
  }

  // Stop ids need not name a tokenizer entry (a model's vocabulary may be larger), but must
  // be token ids.
  constexpr int64_t kIdLimit = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> stops;
  const JsonFields gen_fields(gc, "generation_config.json");
  const JsonFields config_fields(cj, "config.json");
  if (gen_fields.Find("eos_token_id") != nullptr) {
    ROTE_RETURN_IF_ERROR(gen_fields.TokenIds("eos_token_id", kIdLimit, &stops));
  } else if (config_fields.Find("eos_token_id") != nullptr) {
    ROTE_RETURN_IF_ERROR(config_fields.TokenIds("eos_token_id", kIdLimit, &stops));
  } else if (impl.eos) {
    stops.push_back(*impl.eos);
  }
  // The chat format ends every turn with this token, so generation must stop there too.
  const char* turn_end = family == ChatFamily::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
  if (auto t = id_of(std::string(turn_end))) stops.push_back(*t);
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  impl.stop_ids = std::move(stops);
  return OkStatus();
}

// tokenizer.json's model and added tokens: vocabulary, merges and the id tables.
Status LoadModel(const JsonFields& top, Tokenizer::Impl& impl) {
  const Json* model_node = top.Find("model");
  if (model_node == nullptr || !model_node->is_object()) {
    return InvalidArgument("tokenizer.json: field 'model' must be an object");
  }
  const Json& model = *model_node;
  const JsonFields mf(model, kTokenizerJson, "model.");
  std::string unk_token;
  ROTE_RETURN_IF_ERROR(CheckBpeModel(mf, impl, &unk_token));

  // nlohmann keeps object keys sorted, so this walk (and every table built from it) has one
  // order whatever the file's.
  const Json* vocab_node = mf.Find("vocab");
  if (vocab_node == nullptr || !vocab_node->is_object()) {
    return InvalidArgument("tokenizer.json: field 'model.vocab' must be an object");
  }
  const Json& vocab = *vocab_node;
  const Json* added_node = top.Find("added_tokens");
  if (added_node != nullptr && !added_node->is_array()) {
    return InvalidArgument("tokenizer.json: field 'added_tokens' must be a list");
  }
  const Json no_added = Json::array();
  const Json& added_list = added_node == nullptr ? no_added : *added_node;

  // Ids index dense tables, so every id must lie below the number of entries the file holds
  // plus kUnusedIds: the tables then take memory in proportion to the file, whatever ids it
  // claims. The allowance is for ids no token has, which tokenizers accepts: files converted
  // from tiktoken leave some below their special tokens (GPT-4o's <|endofprompt|> is 200018
  // in a file of 200000 tokens); decoding skips such ids.
  constexpr int64_t kUnusedIds = 65536;
  const int64_t entries = static_cast<int64_t>(vocab.size() + added_list.size()) + kUnusedIds;
  std::vector<const std::string*> vocab_token(static_cast<size_t>(entries), nullptr);
  int32_t max_id = -1;
  impl.token_to_id.reserve(vocab.size() + added_list.size());
  impl.bytes_to_id.reserve(vocab.size());
  ROTE_RETURN_IF_ERROR(LoadVocab(vocab, entries, impl, vocab_token, &max_id));
  std::vector<AddedToken> added;
  ROTE_RETURN_IF_ERROR(LoadAddedTokens(added_list, entries, impl, vocab_token, &added, &max_id));
  BuildIdTables(vocab, static_cast<size_t>(max_id + 1), impl);
  ROTE_RETURN_IF_ERROR(impl.LoadMerges(mf.Find("merges")));
  InstallAddedTokens(added, impl);
  BuildIdBytes(impl);
  if (!unk_token.empty()) {
    impl.unk_id = impl.VocabId(unk_token);
    if (impl.unk_id < 0) {
      return InvalidArgument("tokenizer.json: field 'model.unk_token' = '" + unk_token + "' is not in the vocabulary");
    }
  }
  return OkStatus();
}

}  // namespace
}  // namespace tokenizer_internal

StatusOr<Tokenizer> Tokenizer::Load(const std::string& model_dir) {
  const std::string dir = model_dir.empty() || model_dir.back() == '/' ? model_dir : model_dir + "/";
  ROTE_ASSIGN_OR_RETURN(std::string tokenizer_json, ReadModelFile(dir + "tokenizer.json", true));
  ROTE_ASSIGN_OR_RETURN(std::string tokenizer_config, ReadModelFile(dir + "tokenizer_config.json", false));
  ROTE_ASSIGN_OR_RETURN(std::string config, ReadModelFile(dir + "config.json", false));
  ROTE_ASSIGN_OR_RETURN(std::string generation_config, ReadModelFile(dir + "generation_config.json", false));
  // Newer transformers saves the template beside the config as chat_template.jinja; like
  // transformers, that file wins over tokenizer_config.json's chat_template.
  ROTE_ASSIGN_OR_RETURN(std::string template_file, ReadModelFile(dir + "chat_template.jinja", false));
  if (!template_file.empty()) {
    nlohmann::json tc = tokenizer_config.empty() ? nlohmann::json::object()
                                                 : nlohmann::json::parse(tokenizer_config, nullptr, /*allow_exceptions=*/false);
    if (tc.is_object()) {
      tc["chat_template"] = template_file;
      tokenizer_config = tc.dump();
    }  // a malformed tokenizer_config.json is FromJson's to report
  }
  StatusOr<Tokenizer> t = FromJson(tokenizer_json, tokenizer_config, config, generation_config);
  // FromJson's messages start with the file's name; put the directory in front of it.
  if (!t.ok()) return Status(t.status().code(), dir + t.status().message());
  return t;
}

StatusOr<Tokenizer> Tokenizer::FromJson(std::string_view tokenizer_json,
                                        std::string_view tokenizer_config_json,
                                        std::string_view config_json,
                                        std::string_view generation_config_json) {
  using tokenizer_internal::Json;
  using tokenizer_internal::kTokenizerJson;
  if (tokenizer_json.empty()) return InvalidArgument("tokenizer.json: empty");
  ROTE_ASSIGN_OR_RETURN(Json tj, ParseJsonObject(tokenizer_json, kTokenizerJson));
  Json tc = Json::object(), cj = Json::object(), gc = Json::object();
  if (!tokenizer_config_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(tc, ParseJsonObject(tokenizer_config_json, "tokenizer_config.json"));
  }
  if (!config_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(cj, ParseJsonObject(config_json, "config.json"));
  }
  if (!generation_config_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(gc, ParseJsonObject(generation_config_json, "generation_config.json"));
  }

  auto impl = std::make_shared<Impl>();
  const JsonFields top(tj, kTokenizerJson);
  auto member = [&](const char* key) { return top.Find(key) == nullptr ? Json() : *top.Find(key); };
  try {
    ROTE_RETURN_IF_ERROR(tokenizer_internal::LoadNormalizer(member("normalizer"), "normalizer", impl->normalizer));
    ROTE_RETURN_IF_ERROR(tokenizer_internal::LoadPreTokenizer(member("pre_tokenizer"), "pre_tokenizer", impl->pre_tokenizer));
    for (const auto& step : impl->pre_tokenizer) {
      impl->byte_level = impl->byte_level || step.kind == tokenizer_internal::PreTokenizerStep::Kind::kByteLevel;
    }
    ROTE_RETURN_IF_ERROR(tokenizer_internal::LoadDecoder(member("decoder"), "decoder", impl->decoder));
    impl->has_decoder = top.Find("decoder") != nullptr;
    impl->byte_level_decoder = !impl->decoder.empty();
    impl->stream_restartable = true;
    bool joined = false;  // a step before joined the tokens into one string
    for (const auto& step : impl->decoder) {
      using Kind = tokenizer_internal::DecoderStep::Kind;
      impl->byte_level_decoder = impl->byte_level_decoder && step.kind == Kind::kByteLevel;
      impl->decoder_has_byte_fallback = impl->decoder_has_byte_fallback || step.kind == Kind::kByteFallback;
      impl->decoder_has_byte_level = impl->decoder_has_byte_level || step.kind == Kind::kByteLevel;
      if (step.kind == Kind::kByteLevel || (step.kind == Kind::kStrip && step.strip_stop > 0)) {
        impl->stream_restartable = false;
      }
      // A Replace over the joined text can match across tokens: later tokens may change text
      // already decoded, so streaming holds everything back.
      if (joined && step.kind == Kind::kReplace) impl->stream_holds_all = true;
      joined = joined || step.kind == Kind::kFuse || step.kind == Kind::kByteLevel;
    }
    ROTE_RETURN_IF_ERROR(tokenizer_internal::LoadModel(top, *impl));
    const Impl& loaded = *impl;
    ROTE_RETURN_IF_ERROR(tokenizer_internal::LoadPostProcessor(
        member("post_processor"), "post_processor",
        [&loaded](uint64_t id) { return id < loaded.id_known.size() && loaded.id_known[id]; }, impl->prefix_ids,
        impl->suffix_ids));
    ROTE_RETURN_IF_ERROR(tokenizer_internal::LoadSpecialIds(tc, cj, gc, *impl));
  } catch (const Json::exception& e) {
    // Every access above is typed; this is a second line against an exception escaping as an abort.
    return InvalidArgument(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

}  // namespace rote::inference
