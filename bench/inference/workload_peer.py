#!/usr/bin/env python3
"""The peer of the generation workload benchmark: transformers running the work rote ran.

bench_workload --replay FILE records, per number of points N and attempt, every request's prompt
ids (the chat template applied, as rote read them) and its reply length. This script loads the
same synthesized model directory and runs the same rounds with transformers: each attempt's
prompts as one left-padded batch to model.generate, greedy, exactly max(reply lengths of the
round) new tokens (transformers batches statically: a round lasts as long as its longest reply).
It prints, per N, the time for the three rounds, and the prompt and reply tokens of the work
(the useful ones, the same counts rote prints).

  python3 bench/inference/workload_peer.py --model DIR --replay FILE [--mode default|static_compiled]

Modes: "default" (dynamic cache, SDPA attention, bf16); "static_compiled" (a static cache and
transformers' compiled decode step: cache_implementation="static"); each N's rounds run once
untimed first, so compilation is not timed.
"""
import argparse
import collections
import json
import time

import torch
from transformers import AutoModelForCausalLM


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--replay", required=True)
    ap.add_argument("--mode", default="default", choices=["default", "static_compiled"])
    ap.add_argument("--shape", default="")
    args = ap.parse_args()
    rounds = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in open(args.replay):
        j = json.loads(line)
        rounds[j["points"]][j["attempt"]].append((j["prompt_ids"], j["reply_tokens"]))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    model.generation_config.eos_token_id = None
    for n in sorted(rounds):
        work = [rounds[n][a] for a in sorted(rounds[n])]
        passes = 2 if args.mode == "static_compiled" else 1
        for p in range(passes):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            per_round = []
            for r in work:
                r0 = time.perf_counter()
                run_round(model, [x[0] for x in r], max(x[1] for x in r), args.mode)
                per_round.append(time.perf_counter() - r0)
            seconds = time.perf_counter() - t0
        prompt_tokens = sum(len(x[0]) for r in work for x in r)
        generated = sum(x[1] for r in work for x in r)
        print(json.dumps({"system": "transformers " + args.mode, "shape": args.shape, "points": n, "attempts": len(work),
                          "seconds": round(seconds, 3), "rounds_s": [round(s, 3) for s in per_round],
                          "prompt_tokens": prompt_tokens, "generated_tokens": generated,
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
