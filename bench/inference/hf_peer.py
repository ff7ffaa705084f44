#!/usr/bin/env python3
"""The peer that rote's CUDA figures are compared with: PyTorch + transformers on the GPU.

What a user gets from transformers on the same card, on a Qwen2.5-shaped model with random bf16
weights (no model download): the shapes are cuda_bench's --shape (tests/inference/cuda_synth_model.h,
Qwen25Shape; 7b/14b/32b: inference/model/synth.cc), vocabulary 151,936 (152,064 from 7b), tied
embedding below 7b, 64-token prompts; prefill of 1 and 4 prompts of 1,000 tokens.

  python3 bench/inference/hf_peer.py [--shape 0.5b|1.5b|7b|14b|32b|30b-a3b] [--quick] [--compiled-only 32]

Run it on the GPU machine (its python3 has torch and transformers), on the same card and in the
same run as cuda_bench; bench/inference/side_by_side.sh alternates the two and prints the ratio of
the medians (docs/performance.md, "rote against the peer"). Prints one JSON line per measurement:

  - ceilings: device-to-device copy bandwidth, bf16 GEMM rate;
  - batch invariance: the last position's prefill logits of one prompt alone against the same
    prompt inside batches of 8 and 32, the first greedy token where they diverge, and two runs
    at the same batch;
  - decode throughput (tokens/s over 128 greedy steps after 8 warm-up steps) at batch 1 and 32:
      mode "default": transformers' default (dynamic cache, eager);
      mode "static_cache_compiled": a static cache and torch.compile(mode="reduce-overhead",
        fullgraph=True), 12 compile and warm-up steps, then 128 timed steps;
      mode "batch_invariant_ops": only where Thinking Machines' batch_invariant_ops can be
        imported (put its source folder on BIO_PATH).
"""
import argparse
import json
import os
import sys
import time

import torch

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    # Qwen2.5-Coder-7B / 14B / 32B (inference/model/synth.cc, the same dimensions), untied,
    # vocabulary 152,064.
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
               num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False, vocab_size=152064),
    "14b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
                num_attention_heads=40, num_key_value_heads=8, tie_word_embeddings=False, vocab_size=152064),
    "32b": dict(hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
                num_attention_heads=40, num_key_value_heads=8, tie_word_embeddings=False, vocab_size=152064),
    # Qwen3-Coder-30B-A3B (cuda_bench --shape 30b-a3b): a mixture of 128 experts, 8 a token.
    "30b-a3b": dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
                    num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                    num_experts_per_tok=8, norm_topk_prob=True, tie_word_embeddings=False, moe=True),
}
VOCAB = 151936
PROMPT = 64
STEPS = 128
PREFILL_LEN = 1000  # cuda_bench's prefill prompts
DEV = "cuda"


def emit(**kw):
    print(json.dumps(kw), flush=True)


def timed(fn, reps=10, warm=3):
    """Median seconds of fn over reps runs, timed with CUDA events."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return times[len(times) // 2]


def ceilings():
    x = torch.randn(512 * 1024 * 1024, device=DEV, dtype=torch.float32)  # 2 GiB
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x))
    emit(what="copy_bandwidth_TBps", value=2 * x.numel() * 4 / t / 1e12)
    del x, y
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    t = timed(lambda: a @ b)
    emit(what="bf16_gemm_TFLOPs", value=2 * 8192**3 / t / 1e12)
    del a, b
    torch.cuda.empty_cache()


def load_model(shape):
    import transformers
    from transformers import Qwen2Config, Qwen2ForCausalLM
    emit(what="transformers", version=transformers.__version__)
    dims = dict(SHAPES[shape])
    vocab = dims.pop("vocab_size", VOCAB)
    model_class = Qwen2ForCausalLM
    if dims.pop("moe", False):
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        model_class = Qwen3MoeForCausalLM
        cfg = Qwen3MoeConfig(vocab_size=vocab, max_position_embeddings=32768, rope_theta=10000000.0,
                             rms_norm_eps=1e-6, **dims)
    else:
        cfg = Qwen2Config(vocab_size=vocab, max_position_embeddings=32768, rope_theta=1000000.0,
                          rms_norm_eps=1e-6, **dims)
    torch.manual_seed(0)
    # Built on the GPU: random initialisation of 32B parameters on the host would take minutes.
    with torch.device(DEV):
        try:
            model = model_class._from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:  # transformers before the `dtype` argument
            model = model_class._from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    model = model.to(DEV).eval()
    nparams = sum(p.numel() for p in model.parameters())
    emit(what="model", shape=shape, params=nparams, bytes_bf16=2 * nparams)
    return cfg, model


def make_greedy(model):
    from transformers import DynamicCache

    @torch.no_grad()
    def greedy(ids, steps):
        """Greedy tokens after the prompt, and the last prompt position's logits."""
        cache = DynamicCache()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        toks = []
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        first_logits = out.logits[:, -1].float().clone()
        for _ in range(steps):
            toks.append(nxt)
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        return torch.cat(toks, 1), first_logits

    return greedy


def invariance(greedy, prompts, mode):
    alone_tok, alone_log = greedy(prompts[:1], STEPS)
    for bs in (8, 32):
        tok, log = greedy(prompts[:bs], STEPS)
        diverge = (alone_tok[0] != tok[0]).nonzero()
        emit(what="invariance", mode=mode, batch=bs,
             prefill_logits_bitwise_equal=torch.equal(alone_log[0], log[0]),
             prefill_logits_maxdiff=(alone_log[0] - log[0]).abs().max().item(),
             first_divergent_token=int(diverge[0].item()) if diverge.numel() else -1,
             tokens=STEPS)
    t1, _ = greedy(prompts[:8], STEPS)
    t2, _ = greedy(prompts[:8], STEPS)
    emit(what="run_to_run_same_batch", mode=mode, equal=torch.equal(t1, t2))


def throughput(greedy, prompts, mode):
    for bs in (1, 32):
        ids = prompts[:bs]
        greedy(ids, 8)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        greedy(ids, STEPS)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        emit(what="decode_throughput", mode=mode, batch=bs, tokens_per_s=bs * STEPS / dt, seconds=dt)


def prefill(model, cfg):
    """Prefill of 1 and 4 prompts of PREFILL_LEN tokens (eager SDPA, as cuda_bench's prefill)."""
    g = torch.Generator(device="cpu").manual_seed(2)
    for n in (1, 4):
        ids = torch.randint(0, cfg.vocab_size, (n, PREFILL_LEN), generator=g).to(DEV)

        @torch.no_grad()
        def run():
            return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

        t = timed(run, reps=3, warm=1)
        emit(what="prefill", mode="default", prompts=n, prompt_tokens=PREFILL_LEN,
             tokens_per_s=n * PREFILL_LEN / t, seconds=t)


def compiled_throughput(cfg, model, prompts, batches=(1, 32)):
    """A static cache and torch.compile: the strongest easy PyTorch setup (gpt-fast style)."""
    from transformers import StaticCache
    model.generation_config.cache_implementation = "static"
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    fwd = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    for bs in batches:
        t_compile = time.perf_counter()
        ids = prompts[:bs]
        cache = StaticCache(config=cfg, max_batch_size=bs, max_cache_len=256, device=DEV,
                            dtype=torch.bfloat16)
        with torch.no_grad():
            out = model(input_ids=ids, past_key_values=cache, use_cache=True,
                        cache_position=torch.arange(PROMPT, device=DEV))
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            pos = PROMPT

            def step(n, p):
                o = fwd(input_ids=n, past_key_values=cache, use_cache=True,
                        cache_position=torch.tensor([p], device=DEV))
                return o.logits[:, -1].argmax(-1, keepdim=True)

            for _ in range(12):  # compile and warm up
                nxt = step(nxt, pos)
                pos += 1
            torch.cuda.synchronize()
            emit(what="compiled_warm", batch=bs, seconds=time.perf_counter() - t_compile)
            t0 = time.perf_counter()
            for _ in range(STEPS):
                nxt = step(nxt, pos)
                pos += 1
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        emit(what="decode_throughput", mode="static_cache_compiled", batch=bs,
             tokens_per_s=bs * STEPS / dt, seconds=dt)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    parser.add_argument("--quick", action="store_true",
                        help="ceilings, prefill and decode throughput only (no invariance runs)")
    parser.add_argument("--compiled-only", default="",
                        help="only the compiled peer's decode at these batches, e.g. 32 (a large shape's "
                             "compilation takes minutes)")
    args = parser.parse_args()
    if os.environ.get("BIO_PATH"):
        sys.path.insert(0, os.environ["BIO_PATH"])

    props = torch.cuda.get_device_properties(0)
    emit(what="device", name=props.name, sms=props.multi_processor_count, torch=torch.__version__)
    ceilings()
    cfg, model = load_model(args.shape)
    greedy = make_greedy(model)
    g = torch.Generator(device="cpu").manual_seed(1)
    prompts = torch.randint(0, cfg.vocab_size, (32, PROMPT), generator=g).to(DEV)

    if args.compiled_only:
        compiled_throughput(cfg, model, prompts, tuple(int(b) for b in args.compiled_only.split(",")))
        return 0
    prefill(model, cfg)
    if args.quick:
        throughput(greedy, prompts, "default")
        try:
            compiled_throughput(cfg, model, prompts)
        except Exception as ex:
            emit(what="compiled_failed", error=repr(ex)[:800])
        return 0
    invariance(greedy, prompts, "default")
    throughput(greedy, prompts, "default")
    try:
        from batch_invariant_ops import set_batch_invariant_mode
        with set_batch_invariant_mode(True):
            invariance(greedy, prompts, "batch_invariant_ops")
            throughput(greedy, prompts, "batch_invariant_ops")
    except Exception as ex:  # reported, not hidden
        emit(what="batch_invariant_ops_failed", error=repr(ex)[:500])
    try:
        compiled_throughput(cfg, model, prompts)
    except Exception as ex:
        emit(what="compiled_failed", error=repr(ex)[:800])
    return 0


if __name__ == "__main__":
    sys.exit(main())
