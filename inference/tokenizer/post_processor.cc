// The post-processor: which ids encode(text, add_special_tokens=True) puts around a single
// sequence (TemplateProcessing's "single" template, RobertaProcessing's and BertProcessing's
// cls/sep; ByteLevel only trims offsets, so it adds nothing).
#include "inference/tokenizer/tokenizer_internal.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

// RobertaProcessing's / BertProcessing's "cls" or "sep": [token, id].
Status ReadPair(const JsonFields& f, const char* key,
                const std::function<bool(uint64_t)>& known_id, int32_t* id) {
  const Json* v = f.Find(key);
  if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[0].is_string() || !(*v)[1].is_number_unsigned()) {
    return f.Error(key, "must be [token, id]");
  }
  const uint64_t value = (*v)[1].get<uint64_t>();
  if (!known_id(value)) return f.Error(key, "id " + std::to_string(value) + " is not a token id");
  *id = static_cast<int32_t>(value);
  return OkStatus();
}

Status LoadTemplate(const Json& p, const std::string& field,
                    const std::function<bool(uint64_t)>& known_id,
                    std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  const JsonFields f(p, kTokenizerJson, field + ".");
  const Json* single = f.Find("single");
  if (single == nullptr || !single->is_array()) return f.Error("single", "must be a list");
  const Json* specials = f.Find("special_tokens");
  if (specials != nullptr && !specials->is_object()) return f.Error("special_tokens", "must be an object");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const Json& piece : *single) {
    if (!piece.is_object() || piece.size() != 1) return f.Error("single", "must hold SpecialToken or Sequence objects");
    if (auto s = piece.find("Sequence"); s != piece.end()) {
      const Json* id = s->is_object() && s->contains("id") ? &(*s)["id"] : nullptr;
      if (id == nullptr || !id->is_string() || id->get<std::string>() != "A") {
        return f.Error("single", "must use sequence A only");
      }
      if (seen_sequence) return f.Error("single", "must use sequence A once");
      seen_sequence = true;
      continue;
    }
    auto st = piece.find("SpecialToken");
    if (st == piece.end() || !st->is_object() || !st->contains("id") || !(*st)["id"].is_string()) {
      return f.Error("single", "must hold SpecialToken or Sequence objects");
    }
    const std::string name = (*st)["id"].get<std::string>();
    const Json* entry = nullptr;
    if (specials != nullptr) {
      if (auto e = specials->find(name); e != specials->end()) entry = &*e;
    }
    if (entry == nullptr || !entry->is_object() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
      return f.Error("special_tokens", "has no ids for '" + name + "'");
    }
    std::vector<int32_t>& target = seen_sequence ? after : before;
    for (const Json& id : (*entry)["ids"]) {
      if (!id.is_number_unsigned()) return f.Error("special_tokens", "ids of '" + name + "' must be token ids");
      const uint64_t value = id.get<uint64_t>();
      // The id must be a token the tokenizer knows: the tables are indexed by it.
      if (!known_id(value)) {
        return f.Error("special_tokens", "id " + std::to_string(value) + " of '" + name + "' is not a token id");
      }
      target.push_back(static_cast<int32_t>(value));
    }
  }
  if (!seen_sequence) return f.Error("single", "must contain sequence A");
  // Processors of a Sequence wrap what the earlier ones produced.
  prefix.insert(prefix.begin(), before.begin(), before.end());
  suffix.insert(suffix.end(), after.begin(), after.end());
  return OkStatus();
}

}  // namespace

Status LoadPostProcessor(const Json& p, const std::string& field,
                         const std::function<bool(uint64_t)>& known_id,
                         std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (p.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(p, field));
  const JsonFields f(p, kTokenizerJson, field + ".");
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(p, "processors", field));
    for (const Json& child : *children) {
      ROTE_RETURN_IF_ERROR(LoadPostProcessor(child, field + ".processors[]", known_id, prefix, suffix));
    }
    return OkStatus();
  }
  if (type == "ByteLevel") return OkStatus();
  if (type == "TemplateProcessing") return LoadTemplate(p, field, known_id, prefix, suffix);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    int32_t cls = 0, sep = 0;
    ROTE_RETURN_IF_ERROR(ReadPair(f, "cls", known_id, &cls));
    ROTE_RETURN_IF_ERROR(ReadPair(f, "sep", known_id, &sep));
    prefix.insert(prefix.begin(), cls);
    suffix.push_back(sep);
    return OkStatus();
  }
  return InvalidArgument("tokenizer.json: post-processor type '" + type +
                       "' is not supported (supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
                       "BertProcessing, Sequence)");
}

}  // namespace tokenizer_internal
}  // namespace rote::inference
