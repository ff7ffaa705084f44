#!/usr/bin/env python3
"""Where a kernel's warps wait, from ncu's source view (docs/performance.md, how to measure).

Make the input on the GPU machine, one instance of each kernel of interest, e.g. one decode layer:

  ncu --kernel-name-base demangled --launch-skip 700 --launch-count 6 \
      --section SourceCounters --page source --print-source sass --csv \
      build-cuda/bench/inference/cuda_bench --shape 0.5b --steps 8 --prefill 0 --batches 32 --numerics fast > src.csv

then, here or there:

  python3 bench/inference/ncu_source_summary.py src.csv [--kernel N] [--hot 0.01]

For each kernel it prints the warps' stall samples in four phases, cut at the first
griddepcontrol.wait (ACQBULK), the first instruction executed more often than once a warp that is
a copy wait (DEPBAR: the main loop), and the first block barrier after the loop; the instructions
a warp executes in each phase; the phase's leading stall reasons; and, with --hot, every
instruction holding at least that fraction of the samples.
"""
import argparse
import collections
import csv
import sys


def sections(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"Kernel Name"')]
    for n, a in enumerate(starts):
        b = starts[n + 1] if n + 1 < len(starts) else len(lines)
        name = next(csv.reader([lines[a]]))[1]
        rows = list(csv.reader(lines[a + 1:b]))
        if not rows:
            continue
        header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        yield name, header, body


def summarize(name, header, rows, hot):
    ix = {k: i for i, k in enumerate(header)}
    stall_cols = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]

    def samples(r):
        return int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)

    def executed(r):
        return int(r[ix["Instructions Executed"]] or 0)

    def text(r):
        return r[ix["Source"]].strip()

    warps = executed(rows[0]) or 1
    total = sum(samples(r) for r in rows) or 1
    wait = next((n for n, r in enumerate(rows) if "ACQBULK" in text(r)), 0)
    loop = next((n for n, r in enumerate(rows) if "DEPBAR" in text(r) and executed(r) > warps), wait)
    after = next((n for n, r in enumerate(rows) if n > loop and "BAR.SYNC" in text(r)), len(rows))
    print(f"{name[:150]}\n  warps {warps}, stall samples {total}, instructions {len(rows)}")
    for label, a, b in (("before the wait", 0, wait), ("wait to loop", wait, loop), ("loop", loop, after),
                        ("after the loop", after, len(rows))):
        part = rows[a:b]
        s = sum(samples(r) for r in part)
        reasons = collections.Counter()
        for r in part:
            for c in stall_cols:
                reasons[c[len("stall_"):]] += int(r[ix[c]] or 0)
        per_warp = sum(executed(r) for r in part) / warps
        top = ", ".join(f"{k} {v}" for k, v in reasons.most_common(3) if v > 0)
        print(f"  {label:16s} {s / total:6.1%} of samples, {per_warp:7.0f} instructions a warp  [{top}]")
    if hot > 0:
        for n, r in enumerate(rows):
            if samples(r) >= hot * total:
                reasons = sorted(((int(r[ix[c]] or 0), c[len("stall_"):]) for c in stall_cols), reverse=True)[:2]
                print(f"    {n:5d} {text(r)[:56]:56s} {samples(r) / total:6.1%}  executed {executed(r):7d}  {reasons}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--kernel", type=int, default=-1, help="only the Nth kernel section (0-based)")
    parser.add_argument("--hot", type=float, default=0.0, help="list instructions with this share of samples")
    args = parser.parse_args()
    found = False
    previous = None
    for n, (name, header, rows) in enumerate(sections(args.csv)):
        if args.kernel >= 0 and n != args.kernel:
            continue
        # ncu repeats some kernels' tables; print each table once.
        if (name, rows) == previous:
            continue
        previous = (name, rows)
        found = True
        print(f"[{n}] ", end="")
        summarize(name, header, rows, args.hot)
    if not found:
        print("no kernel sections in the file (is it ncu --page source --csv output?)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head
        sys.exit(0)
