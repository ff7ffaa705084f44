#!/usr/bin/env bash
# rote against the compiled transformers peer at batch 32, alternated on one card in one call:
#   side_by_side.sh CUDA_BENCH HF_PEER OUTDIR [ROUNDS [CHAIN]]
# runs rote, then ROUNDS times (peer, rote), so that every peer run has a rote run on either side;
# CHAIN (default 1) is cuda_bench's --chain: rote's steps as ForwardGreedySteps runs of that many
# (8 is what the engine takes by default); each run's JSON lines go to OUTDIR (rote_N.jsonl, peer_N.jsonl), then side_by_side.py prints the
# medians and their ratio. The peer's figure moves 10-25% from run to run (docs/performance.md),
# so one pairing is not a measurement; the ratio of the medians is what the issue's target is
# judged by (docs/performance.md, "How batch 32 is compared with the peer").
set -euo pipefail
bench="$1" peer="$2" out="$3" rounds="${4:-2}" chain="${5:-1}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
rote_run() {
  echo "side_by_side: rote run $1" >&2
  "$bench" --shape 0.5b --steps 128 --prefill 0 --batches 32 --numerics fast --chain "$chain" > "$out/rote_$1.jsonl"
}
rote_run 0
for ((i = 1; i <= rounds; ++i)); do
  echo "side_by_side: peer run $i" >&2
  python3 "$peer" --shape 0.5b > "$out/peer_$i.jsonl"
  rote_run "$i"
done
python3 "$here/side_by_side.py" "$out"
