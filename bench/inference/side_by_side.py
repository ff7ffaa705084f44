#!/usr/bin/env python3
"""Summarises side_by_side.sh's runs: rote's fast batch-32 decode against the compiled peer's.

  side_by_side.py DIR [DIR ...]

Reads every DIR's rote_*.jsonl (cuda_bench) and peer_*.jsonl (hf_peer.py) and prints one JSON
line: each run's tokens/s, the medians, the ratio of the medians, and every peer run against the
mean of the rote runs on either side of it. A run that printed no figure is reported, not skipped.
"""
import glob, json, os, statistics, sys


def lines(path):
    out = []
    with open(path) as f:
        for raw in f:
            raw = raw.strip()
            if raw.startswith("{"):
                try:
                    out.append(json.loads(raw))
                except json.JSONDecodeError:
                    pass
    return out


def run_index(path):
    return int(os.path.basename(path).split("_")[1].split(".")[0])


def main(dirs):
    rote, peer, problems = {}, {}, []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "rote_*.jsonl")), key=run_index):
            got = [l for l in lines(path) if l.get("what") == "decode" and l.get("batch") == 32]
            if not got:
                problems.append(f"{path}: no batch-32 decode line")
                continue
            rote[(d, run_index(path))] = got[0]
        for path in sorted(glob.glob(os.path.join(d, "peer_*.jsonl")), key=run_index):
            got = [l for l in lines(path) if l.get("what") == "decode_throughput"
                   and l.get("mode") == "static_cache_compiled" and l.get("batch") == 32]
            if not got:
                problems.append(f"{path}: no compiled batch-32 line")
                continue
            peer[(d, run_index(path))] = got[0]["tokens_per_s"]
    if not rote or not peer:
        print(json.dumps({"what": "side_by_side", "error": "missing runs", "problems": problems}))
        return 1
    rote_tps = [v["tokens_per_s"] for v in rote.values()]
    pairs = []
    for (d, i), p in sorted(peer.items()):
        around = [rote[k]["tokens_per_s"] for k in ((d, i - 1), (d, i)) if k in rote]
        if around:
            pairs.append(round(statistics.mean(around) / p, 3))
    med_r, med_p = statistics.median(rote_tps), statistics.median(peer.values())
    print(json.dumps({
        "what": "side_by_side", "batch": 32,
        "rote_tokens_per_s": rote_tps, "peer_compiled_tokens_per_s": list(peer.values()),
        "rote_median": med_r, "peer_median": med_p, "ratio_of_medians": round(med_r / med_p, 3),
        "ratio_each_peer_run": pairs,
        "rote_needle_equal": all(v.get("needle_tokens_equal_batch1") for v in rote.values()),
        "rote_tokens_fnv": sorted({v.get("tokens_fnv") for v in rote.values()}),
        "rote_chain": sorted({v.get("chain", 1) for v in rote.values()}),
        "problems": problems}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["."]))
