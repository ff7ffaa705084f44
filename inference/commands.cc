#include "inference/commands.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "inference/engine.h"
#include "inference/model/synth.h"
#include "inference/tokenizer/tokenizer_tool.h"

namespace rote::inference::tool {
namespace {

constexpr const char* kModelUsage =
    "usage: model info DIR | model tokenize|detokenize|chat DIR ... | model synth --family FAMILY --shape tiny|small|0.5b|1.5b|7b|14b|32b --out DIR "
    "[--dtype bf16|f16|f32] [--seed N] (FAMILY: a supported config.json model_type)";
constexpr const char* kGenerateUsage =
    "usage: generate --model DIR (--prompt TEXT | --chat TEXT | --tokens 1,2,3) [--system TEXT] [--max-tokens N] "
    "[--temperature T] [--top-k K] [--top-p P] [--seed N] [--stop TEXT]... [--ignore-eos] [--threads N] "
    "[--device cpu|cuda|cuda:N] [--numerics exact|fast] [--kv-cache-mb N] [--max-context N]";

Status Usage(const char* usage, const std::string& problem) {
  return InvalidArgument(std::string(usage) + "\n" + problem);
}

// --name value / --name=value flags (repeatable ones collect), booleans, positionals.
struct Flags {
  std::multimap<std::string, std::string> values;
  std::set<std::string> booleans;
  std::vector<std::string> positionals;

  bool Has(const std::string& n) const { return values.count(n) > 0 || booleans.count(n) > 0; }
  std::string Get(const std::string& n, const std::string& fallback = "") const {
    auto it = values.find(n);
    return it == values.end() ? fallback : it->second;
  }
};

StatusOr<Flags> Parse(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                      const std::set<std::string>& boolean, const char* usage) {
  Flags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      f.positionals.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (boolean.count(name)) {
      if (inline_value) return Usage(usage, "--" + name + " takes no value");
      f.booleans.insert(name);
    } else if (with_value.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return Usage(usage, "--" + name + " needs a value");
        value = args[++i];
      }
      f.values.emplace(name, value);
    } else {
      return Usage(usage, "unknown flag --" + name);
    }
  }
  return f;
}

StatusOr<int64_t> ParseInt(const std::string& s, const std::string& flag, const char* usage) {
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
    return static_cast<int64_t>(v);
  } catch (...) {
    return Usage(usage, "--" + flag + " needs an integer, got '" + s + "'");
  }
}

StatusOr<float> ParseFloat(const std::string& s, const std::string& flag, const char* usage) {
  try {
    size_t used = 0;
    const float v = std::stof(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (...) {
    return Usage(usage, "--" + flag + " needs a number, got '" + s + "'");
  }
}

Status Info(const std::string& dir, std::ostream& out) {
  ROTE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(dir));
  // A directory whose tokenizer does not load cannot generate: it is an error, as for the
  // engine, not a line of the report.
  ROTE_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(dir));
  const ModelConfig& c = model->config();
  const ModelWeights& w = model->weights();
  const int64_t params = w.parameter_count(c.tie_word_embeddings);
  std::string eos;
  for (int32_t id : c.eos_token_ids) eos += (eos.empty() ? "" : ",") + std::to_string(id);
  out << "directory:        " << dir << "\n"
      << "family:           " << (c.model_type.empty() ? std::string(ModelFamilyName(c.family)) : c.model_type) << " ("
      << c.architecture << ")\n"
      << "parameters:       " << params << "\n"
      << "weights:          " << DTypeName(w.layers.empty() ? w.embed.dtype : w.layers[0].wq.dtype) << ", " << model->weight_bytes_per_token()
      << " bytes read per decoded token\n"
      << "layers:           " << c.num_layers << "\n"
      << "hidden size:      " << c.hidden_size << " (MLP " << c.intermediate_size << ")\n"
      << (c.has_moe() ? "experts:          " + std::to_string(c.num_experts) + " of MLP " +
                                std::to_string(c.moe_intermediate_size) + ", " + std::to_string(c.experts_per_token) +
                                " a token" + (c.norm_topk_prob ? " (weights renormalised)" : "") + ", in " +
                                std::to_string(std::count(c.moe_layers.begin(), c.moe_layers.end(), 1)) + " of " +
                                std::to_string(c.num_layers) + " layers\n"
                          : std::string())
      << "heads:            " << c.num_heads << " query, " << c.num_kv_heads << " key/value, head_dim " << c.head_dim
      << "\n"
      << "vocabulary:       " << c.vocab_size << (c.tie_word_embeddings ? " (tied embeddings)" : "") << "\n"
      << "rope:             theta " << c.rope_theta
      << (c.rope_scaling.type == RopeScaling::Type::kLlama3   ? ", llama3 scaling factor " + std::to_string(c.rope_scaling.factor)
          : c.rope_scaling.type == RopeScaling::Type::kLinear ? ", linear scaling factor " + std::to_string(c.rope_scaling.factor)
          : c.rope_scaling.type == RopeScaling::Type::kLongRope ? std::string(", longrope scaling")
                                                                : std::string())
      << "\n"
      << "context:          " << c.max_position_embeddings << "\n"
      << "rms_norm_eps:     " << c.rms_norm_eps << "\n"
      << "q/k/v biases:     " << (c.attention_bias ? "yes" : "no") << "\n"
      << "q/k norms:        " << (c.qk_norm ? "yes" : "no") << "\n"
      << "eos token ids:    " << eos << "\n"
      << "KV bytes/token:   " << KvBytesPerBlock(c) / kKvBlockSize << " (fp32)\n"
      << "digest:           sha256:" << model->digest() << "\n"
      << "tokenizer:        " << tok.vocab_size() << " tokens\n";
  return OkStatus();
}

Status Synth(const Flags& f, std::ostream& out) {
  SynthOptions o;
  if (!f.Has("family") || !f.Has("shape") || !f.Has("out")) return Usage(kModelUsage, "synth needs --family, --shape and --out");
  auto family = ParseModelFamily(f.Get("family"));
  if (!family.ok()) return Usage(kModelUsage, family.status().message());
  o.family = *family;
  o.shape = f.Get("shape");
  const std::string dtype = f.Get("dtype", "bf16");
  if (dtype == "bf16") {
    o.dtype = DType::kBF16;
  } else if (dtype == "f16") {
    o.dtype = DType::kF16;
  } else if (dtype == "f32") {
    o.dtype = DType::kF32;
  } else {
    return Usage(kModelUsage, "--dtype must be bf16, f16 or f32");
  }
  if (f.Has("seed")) {
    ROTE_ASSIGN_OR_RETURN(int64_t seed, ParseInt(f.Get("seed"), "seed", kModelUsage));
    o.seed = static_cast<uint64_t>(seed);
  }
  if (!SynthConfig(o).ok()) return Usage(kModelUsage, SynthConfig(o).status().message());
  const std::string dir = f.Get("out");
  ROTE_RETURN_IF_ERROR(SynthesizeModel(o, dir));
  out << "wrote " << ModelFamilyName(o.family) << " " << o.shape << " (" << dtype << ", seed " << o.seed << ") to "
      << dir << "\n";
  return OkStatus();
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

bool IsUsageError(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument && status.message().rfind("usage:", 0) == 0;
}

Status ModelCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  (void)err;
  if (args.empty()) return Usage(kModelUsage, "missing subcommand");
  if (IsTokenizerSubcommand(args[0])) return TokenizerCommand(args, std::cin, out);
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "info") {
    ROTE_ASSIGN_OR_RETURN(Flags f, Parse(rest, {}, {}, kModelUsage));
    if (f.positionals.size() != 1) return Usage(kModelUsage, "model info takes one directory");
    return Info(f.positionals[0], out);
  }
  if (args[0] == "synth") {
    ROTE_ASSIGN_OR_RETURN(Flags f, Parse(rest, {"family", "shape", "out", "dtype", "seed"}, {}, kModelUsage));
    if (!f.positionals.empty()) return Usage(kModelUsage, "unexpected argument '" + f.positionals[0] + "'");
    return Synth(f, out);
  }
  return Usage(kModelUsage, "unknown subcommand '" + args[0] + "'");
}

Status GenerateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ROTE_ASSIGN_OR_RETURN(
      Flags f, Parse(args,
                     {"model", "prompt", "chat", "system", "tokens", "max-tokens", "temperature", "top-k", "top-p",
                      "seed", "stop", "threads", "device", "numerics", "kv-cache-mb", "max-context"},
                     {"ignore-eos"}, kGenerateUsage));
  if (!f.positionals.empty()) return Usage(kGenerateUsage, "unexpected argument '" + f.positionals[0] + "'");
  if (!f.Has("model")) return Usage(kGenerateUsage, "--model DIR is required");
  const int forms = f.Has("prompt") + f.Has("chat") + f.Has("tokens");
  if (forms != 1) return Usage(kGenerateUsage, "give exactly one of --prompt, --chat, --tokens");
  EngineOptions eo;
  if (!ParseDeviceName(f.Get("device", "cpu"), &eo).ok())
    return Usage(kGenerateUsage, "--device must be cpu, cuda or cuda:N (N a device ordinal)");
  const std::string numerics = f.Get("numerics", "exact");
  if (numerics == "fast") {
    if (eo.device != Device::kCuda) return Usage(kGenerateUsage, "--numerics fast needs --device cuda (tensor cores)");
    eo.numerics_profile = NumericsProfile::kFast;
  } else if (numerics != "exact") {
    return Usage(kGenerateUsage, "--numerics must be exact or fast");
  }
  if (f.Has("threads")) {
    ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(f.Get("threads"), "threads", kGenerateUsage));
    eo.threads = static_cast<int>(v);
  }
  // KV memory: on CUDA every block free device memory holds unless capped; on the CPU 256 MiB
  // unless set (EngineOptions::kv_cache_bytes).
  if (eo.device == Device::kCuda) eo.kv_cache_bytes = 0;
  if (f.Has("kv-cache-mb")) {
    ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(f.Get("kv-cache-mb"), "kv-cache-mb", kGenerateUsage));
    if (v < 1 || v > (int64_t{1} << 30)) return Usage(kGenerateUsage, "--kv-cache-mb must be between 1 and 2^30");
    eo.kv_cache_bytes = v << 20;
  }
  eo.max_context = 4096;
  if (f.Has("max-context")) {
    ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(f.Get("max-context"), "max-context", kGenerateUsage));
    eo.max_context = static_cast<int32_t>(v);
  }
  GenerationRequest r;
  r.sampling.max_tokens = 128;
  if (f.Has("max-tokens")) {
    ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(f.Get("max-tokens"), "max-tokens", kGenerateUsage));
    r.sampling.max_tokens = static_cast<int32_t>(v);
  }
  if (f.Has("temperature")) {
    ROTE_ASSIGN_OR_RETURN(r.sampling.temperature, ParseFloat(f.Get("temperature"), "temperature", kGenerateUsage));
  }
  if (f.Has("top-p")) {
    ROTE_ASSIGN_OR_RETURN(r.sampling.top_p, ParseFloat(f.Get("top-p"), "top-p", kGenerateUsage));
  }
  if (f.Has("top-k")) {
    ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(f.Get("top-k"), "top-k", kGenerateUsage));
    r.sampling.top_k = static_cast<int32_t>(v);
  }
  if (f.Has("seed")) {
    ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(f.Get("seed"), "seed", kGenerateUsage));
    r.sampling.seed = static_cast<uint64_t>(v);
  }
  for (auto [it, end] = f.values.equal_range("stop"); it != end; ++it) r.sampling.stop.push_back(it->second);
  r.sampling.ignore_eos = f.Has("ignore-eos");
  if (f.Has("prompt")) {
    r.prompt = f.Get("prompt");
  } else if (f.Has("chat")) {
    if (f.Has("system")) r.messages.push_back({"system", f.Get("system")});
    r.messages.push_back({"user", f.Get("chat")});
  } else {
    for (const std::string& t : SplitComma(f.Get("tokens"))) {
      ROTE_ASSIGN_OR_RETURN(int64_t v, ParseInt(t, "tokens", kGenerateUsage));
      r.prompt_tokens.push_back(static_cast<int32_t>(v));
    }
  }
  const auto t_load = std::chrono::steady_clock::now();
  ROTE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Load(f.Get("model"), eo));
  const auto t_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t_first;
  int streamed = 0;
  r.on_token = [&](const TokenEvent& e) {
    if (streamed++ == 0) t_first = std::chrono::steady_clock::now();
    out << e.text << std::flush;
  };
  ROTE_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(r)));
  ROTE_ASSIGN_OR_RETURN(GenerationResult res, engine->Wait(id));
  const auto t_end = std::chrono::steady_clock::now();
  out << "\n" << std::flush;
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double decode_s = streamed > 1 ? secs(t_first, t_end) : 0.0;
  err << "[" << FinishReasonName(res.finish_reason) << "; prompt " << res.prompt_tokens.size() << " tokens, generated "
      << res.tokens.size() << "; load " << secs(t_load, t_start) << " s, first token " << secs(t_start, t_first)
      << " s, decode " << (decode_s > 0 ? (streamed - 1) / decode_s : 0.0) << " tok/s; " << res.provenance.device
      << ", profile " << res.provenance.numerics_profile << ", KV cache " << (engine->kv_cache_bytes() >> 20) << " MiB"
      << ", model sha256:" << res.provenance.model_digest << "]\n";
  return OkStatus();
}

}  // namespace rote::inference::tool
