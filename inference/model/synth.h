// Random-weight model directories in the published Hugging Face layout, for tests and
// benchmarks: config.json, generation_config.json, model.safetensors (real safetensors),
// tokenizer.json (a byte-level BPE: 256 byte tokens, no merges, the family's special tokens)
// and tokenizer_config.json. Deterministic from the seed: the same options give the same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "inference/model/config.h"
#include "inference/model/weights.h"
#include "inference/status.h"

namespace rote::inference {

struct SynthOptions {
  ModelFamily family = ModelFamily::kQwen2;
  // "tiny" (2 layers, dim 64, head_dim 16, vocab 384), "small" (4 layers, dim 256,
  // head_dim 64, vocab 1024), "0.5b" (Qwen2.5-0.5B / Qwen3-0.6B dimensions), "1.5b"
  // (Qwen2.5-1.5B / Qwen3-1.7B dimensions), "7b", "14b", "32b" (Qwen2.5-Coder-7B / 14B / 32B, untied;
  // Qwen3-8B / 14B / 32B for Qwen3). Llama uses the Qwen2.5 dimensions with Llama 3's
  // vocabulary size, rope_theta and llama3 rope scaling; the other families the Qwen2.5
  // dimensions with their own features (windows of 24 at tiny / small, 4096 above; Gemma 3 with
  // a global layer every second layer at tiny / small; Phi-3's long factors from position 32 at
  // tiny / small), written as the family's published config.json keys. qwen3_moe takes Qwen3's
  // dimensions with 8 experts, 2 a token (40, 4 a token at small; a dense layer at tiny / small),
  // and "30b-a3b" is
  // Qwen3-Coder-30B-A3B (128 experts, 8 a token).
  std::string shape = "tiny";
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  // 0: the shape's layers; N: only its first N (a profile of a large shape's layers without
  // its size).
  int32_t layers = 0;
};

// The config a synthesized model of these options has.
StatusOr<ModelConfig> SynthConfig(const SynthOptions& options);

// Writes the model directory (created if needed; existing files of the same names replaced).
Status SynthesizeModel(const SynthOptions& options, const std::string& out_dir);

// The same model's weights (the same bytes as model.safetensors) built in anonymous memory by
// `threads` threads, for shapes whose file would not fit a disk (32b is 65.5 GB in bf16). No
// tokenizer files; dir() is "synth:<family>:<shape>"; the digest covers config, dtype and seed.
StatusOr<std::shared_ptr<const Model>> SynthesizeModelInMemory(const SynthOptions& options, int threads);

}  // namespace rote::inference
