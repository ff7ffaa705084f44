#!/usr/bin/env bash
# rote against the compiled transformers peer at batch 32, alternated on one card in one run:
#   side_by_side.sh CUDA_BENCH [HF_PEER|-] OUTDIR [ROUNDS [CHAIN]]
# HF_PEER defaults (given as - or empty) to hf_peer.py beside this script. Runs rote, then ROUNDS
# times (peer, rote), so that every peer run has a rote run on either side; CHAIN (default 1) is
# cuda_bench's --chain: rote's steps as ForwardGreedySteps runs of that many (8 is the engine's
# default). Each run's JSON lines go to OUTDIR (rote_N.jsonl, peer_N.jsonl), then side_by_side.py
# prints the medians and their ratio. The peer's figure moves by up to about 20% from run to run,
# so one pairing is not a measurement; the ratio of the medians is what the batch-32 target is
# judged by (docs/performance.md, "rote against the peer").
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bench="$1" peer="${2:-}" out="$3" rounds="${4:-2}" chain="${5:-1}"
if [[ -z "$peer" || "$peer" == "-" ]]; then peer="$here/hf_peer.py"; fi
mkdir -p "$out"
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
