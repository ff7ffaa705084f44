#!/usr/bin/env python3
"""The peer of the generation workload benchmark: transformers running the work rote ran.

bench_workload --replay FILE records, per number of points N and attempt, every request's prompt
ids (the chat template applied, as rote read them) and its reply length. This script runs the same
rounds with transformers: each attempt's prompts as one left-padded batch to model.generate,
greedy, exactly max(reply lengths of the round) new tokens (transformers batches statically: a
round lasts as long as its longest reply). It prints, per N, one JSON line: the time for the three
rounds, and the prompt and reply tokens of the work (the useful ones, the same counts rote prints).
Progress goes to stderr.

  python3 bench/inference/workload_peer.py (--shape 0.5b|1.5b|7b | --model DIR) --replay FILE
      [--mode default|static_compiled] [--points 1,8] [--time-limit S] [--deadline S]

--shape builds the model from its config on the GPU with random bf16 weights: the dimensions of
bench_workload's synthesized model of that shape (inference/model/synth.cc, Qwen2 family:
Qwen2.5-0.5B / 1.5B, tied embedding; Qwen2.5-Coder-7B, untied), so no model directory is written
or read. --model DIR loads a directory instead (bench_workload --model-dir DIR writes one).
Random weights change nothing here: every reply has its fixed length.

Modes: "default" (dynamic cache, SDPA attention, bf16); "static_compiled" (a static cache and
transformers' compiled decode step: cache_implementation="static"; each N's rounds run once
untimed first, so compilation is not timed). --points runs only those N of the replay file.
--time-limit S stops an N (untimed pass included) S seconds after it starts, --deadline S whatever
runs S seconds after the script started (model building included): the cut N's line says
"complete": false, and the larger N are skipped.
"""
import argparse
import collections
import json
import signal
import sys
import time

import torch

# bench_workload's synthesized shapes (inference/model/synth.cc, SynthConfig of the Qwen2 family):
# rope_theta 1e6, rms_norm_eps 1e-6, 32,768 positions, no sliding window, q/k/v biases.
SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, head_dim=64, vocab_size=151936, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, head_dim=128, vocab_size=152064, tie_word_embeddings=False),
}


def log(msg):
    print("[peer] " + msg, file=sys.stderr, flush=True)


class TimeLimit(Exception):
    pass


def on_alarm(signum, frame):
    raise TimeLimit()


def build_model(shape):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      use_sliding_window=False, bos_token_id=256, eos_token_id=258, **SHAPES[shape])
    torch.manual_seed(0)
    # Built on the GPU: random initialisation of 7B parameters on the host takes minutes.
    with torch.device("cuda"):
        try:
            model = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:  # transformers before the `dtype` argument
            model = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    return model


def load_model(path):
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa")
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    return model


def run_round(model, prompts, new_tokens, mode):
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    kwargs = dict(input_ids=ids.cuda(), attention_mask=mask.cuda(), max_new_tokens=new_tokens,
                  min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if mode == "static_compiled":
        kwargs["cache_implementation"] = "static"
    with torch.inference_mode():
        out = model.generate(**kwargs)
    torch.cuda.synchronize()
    return out.shape[1] - width


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--shape", choices=sorted(SHAPES), help="build this shape on the GPU, random weights")
    src.add_argument("--model", help="a model directory (bench_workload --model-dir)")
    ap.add_argument("--replay", required=True, help="bench_workload --replay's file")
    ap.add_argument("--mode", default="default", choices=["default", "static_compiled"])
    ap.add_argument("--points", default="", help="only these N of the replay file, e.g. 1,8")
    ap.add_argument("--time-limit", type=float, default=0, help="seconds an N may take (0: no limit)")
    ap.add_argument("--deadline", type=float, default=0, help="seconds the whole run may take (0: no limit)")
    args = ap.parse_args()
    started = time.perf_counter()

    rounds = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in open(args.replay):
        j = json.loads(line)
        rounds[j["points"]][j["attempt"]].append((j["prompt_ids"], j["reply_tokens"]))
    wanted = sorted(rounds) if not args.points else [int(x) for x in args.points.split(",")]
    missing = [n for n in wanted if n not in rounds]
    if missing:
        log("no rounds for N = %s in %s (it has %s): not run" % (missing, args.replay, sorted(rounds)))
        wanted = [n for n in wanted if n in rounds]
    if not wanted:
        sys.exit("nothing to run")

    if args.mode == "static_compiled":
        # One compilation per static cache shape (batch, cache length): three rounds at each N. The
        # default limit of 8 would send the later N's decode steps back to eager.
        from torch import _dynamo
        for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                    "accumulated_recompile_limit"):
            if hasattr(_dynamo.config, key):
                setattr(_dynamo.config, key, max(getattr(_dynamo.config, key), 256))

    import transformers
    t0 = time.perf_counter()
    model = (build_model(args.shape) if args.shape else load_model(args.model)).cuda().eval()
    model.generation_config.eos_token_id = None
    vocab = model.config.vocab_size
    top = max(max(p[0]) for n in wanted for r in rounds[n].values() for p in r)
    if top >= vocab:
        sys.exit("the replay has token id %d, past the model's vocabulary of %d: another shape's replay?" % (top, vocab))
    params = sum(p.numel() for p in model.parameters())
    log("model %s ready: %.2fB parameters, vocabulary %d (%.1f s); transformers %s, torch %s" %
        (args.shape or args.model, params / 1e9, vocab, time.perf_counter() - t0, transformers.__version__,
         torch.__version__))

    signal.signal(signal.SIGALRM, on_alarm)
    shape = args.shape or args.model
    skip = False
    for n in wanted:
        work = [rounds[n][a] for a in sorted(rounds[n])]
        prompt_tokens = sum(len(x[0]) for r in work for x in r)
        generated = sum(x[1] for r in work for x in r)
        line = {"system": "transformers " + args.mode, "shape": shape, "points": n, "attempts": len(work),
                "prompt_tokens": prompt_tokens, "generated_tokens": generated,
                "transformers": transformers.__version__, "torch": torch.__version__}
        if skip:
            print(json.dumps(dict(line, skipped=True)), flush=True)
            continue
        passes = 2 if args.mode == "static_compiled" else 1
        n0 = time.perf_counter()
        limits = [args.time_limit] if args.time_limit > 0 else []
        if args.deadline > 0:
            limits.append(args.deadline - (n0 - started))
        if limits and min(limits) <= 0:
            skip = True
            print(json.dumps(dict(line, skipped=True)), flush=True)
            continue
        if limits:
            signal.setitimer(signal.ITIMER_REAL, min(limits))
        seconds, per_round, untimed = 0.0, [], None
        try:
            for p in range(passes):
                torch.cuda.synchronize()
                p0 = time.perf_counter()
                per_round = []
                # The untimed pass takes the round of the longest cache first: transformers keeps a
                # static cache that is long enough for the next call, so the later rounds, and the
                # timed pass, run on that cache's compiled step instead of compiling their own.
                order = list(enumerate(work))
                if p + 1 < passes:
                    order.sort(key=lambda kr: -(max(len(x[0]) for x in kr[1]) + max(x[1] for x in kr[1])))
                for k, r in order:
                    r0 = time.perf_counter()
                    run_round(model, [x[0] for x in r], max(x[1] for x in r), args.mode)
                    per_round.append(time.perf_counter() - r0)
                    log("%s %s N=%d pass %d/%d attempt %d: %.2f s (%d prompts, widest %d, %d new tokens)" %
                        (shape, args.mode, n, p + 1, passes, k + 1, per_round[-1], len(r), max(len(x[0]) for x in r),
                         max(x[1] for x in r)))
                seconds = time.perf_counter() - p0
                if p + 1 < passes:
                    untimed = seconds
            complete = True
        except TimeLimit:
            complete = False
            skip = True
            log("%s %s N=%d stopped at its time limit (%.0f s); larger N skipped" % (shape, args.mode, n, min(limits)))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        line.update(complete=complete, seconds=round(seconds, 3) if complete else None,
                    rounds_s=[round(s, 3) for s in per_round] if complete else [],
                    wall_s=round(time.perf_counter() - n0, 3))
        if untimed is not None:
            line["untimed_pass_s"] = round(untimed, 3)
        print(json.dumps(line), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
