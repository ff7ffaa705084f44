#!/usr/bin/env bash
# The generation workload on the GPU machine (docs/performance.md, "The generation workload"):
# rote exact (recording the replay), rote fast, rote fast at max_batch 32, the transformers peer
# with a static cache and a compiled decode step, and the peer's default mode at 1 and 8 points,
# for each shape, on one workload file, within one time budget. Every JSON line and log goes to
# OUT; summary.md at the end holds the table.
#
#   bench/inference/workload_run.sh OUT WORKLOAD [SHAPES] [BUDGET_S] [POINTS] [STEPS]
#     SHAPES: 0.5b,1.5b,7b    BUDGET_S: 560 (seconds for everything)    POINTS: 1,8,32
#     STEPS: exact,fast,fast_b32,compiled,default (the peer's steps run exact's replay, or
#     fast's where exact is not among the steps)
#
# Run it from the repository's root (the bench and the peer are found there; the vocabulary comes
# from the workload's .vocab, or from the tree's text where it has none).
# WORKLOAD: bench/inference/workload/workload.jsonl.xz (the prompts and vocabulary the figures of
# docs/performance.md used), or `workload_prompts --out FILE --points 32` (bench/orchestrator, the
# full build; it writes FILE.vocab beside FILE).
# The bench: $BENCH when set, else build-gpu/pack/bench_workload.xz (a stripped binary, xz)
# unpacked to a scratch directory, else build-cuda/bench/inference/bench_workload. The peer:
# python3 with torch and transformers.
#
# Order: rote's steps for every shape, then the compiled peer for every shape, then the default
# peer (so a slow compilation costs only the peer's columns). Each step gets at most its cap
# (seconds, per shape below: about twice what it is expected to take on an H200, the compiled
# peer's compilations being the least known) and what is left of the budget less 20 s, both as the
# program's own --deadline (it prints what it finished, and "complete":false for a cut N) and as
# an outer `timeout` 20 s later. A step that would get under 20 s is skipped.
set -u
usage="usage: workload_run.sh OUT WORKLOAD [SHAPES] [BUDGET_S] [POINTS] [STEPS]"
out=${1:?$usage}
workload=${2:?$usage}
shapes=${3:-0.5b,1.5b,7b}
budget=${4:-560}
points=${5:-1,8,32}
steps=,${6:-exact,fast,fast_b32,compiled,default},
root=$(pwd)
start=$(date +%s)
mkdir -p "$out"
workload=$(readlink -f "$workload")
[ -s "$workload" ] || { echo "no workload file $workload" >&2; exit 2; }
# A compressed workload (bench/inference/workload/workload.jsonl.xz, with its .vocab.xz beside it)
# is unpacked to a scratch directory; bench_workload takes <workload>.vocab from beside the file.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [[ $workload == *.xz ]]; then
  plain=$scratch/$(basename "${workload%.xz}")
  xz -dc "$workload" > "$plain" || exit 2
  [ -f "${workload%.xz}.vocab.xz" ] && { xz -dc "${workload%.xz}.vocab.xz" > "$plain.vocab" || exit 2; }
  workload=$plain
fi
[ -f "$workload.vocab" ] || echo "no $workload.vocab: the vocabulary comes from this tree's text" >&2

bench=${BENCH:-}
if [ -z "$bench" ] && [ -f build-gpu/pack/bench_workload.xz ]; then
  bench=$scratch/bench_workload
  xz -dc build-gpu/pack/bench_workload.xz > "$bench" && chmod +x "$bench"
fi
[ -z "$bench" ] && bench=build-cuda/bench/inference/bench_workload
[ -x "$bench" ] || { echo "no bench_workload ($bench)" >&2; exit 2; }
peer=(python3 "$root/bench/inference/workload_peer.py")

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > "$out/card.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' \
  >> "$out/card.txt" 2>&1
printf 'step\trc\tseconds\tlimit_s\n' > "$out/steps.tsv"

# Caps in seconds: rote exact, rote fast, rote fast at max_batch 32, peer compiled, peer default.
caps() {
  case $1 in
    0.5b) echo 80 70 60 180 130 ;;
    1.5b) echo 110 90 80 300 150 ;;
    7b) echo 240 230 210 550 180 ;;
    *) echo 200 200 200 300 200 ;;
  esac
}
want() { [[ $steps == *",$1,"* ]]; }

# step NAME CAP CMD...: runs CMD (stdout to OUT/NAME.jsonl, stderr to OUT/NAME.err) under the
# smaller of CAP and what is left of the budget less 20 s; @LIMIT@ in CMD stands for that limit
# (the program's own --deadline), and `timeout` stops it 20 s after.
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  local limit=$((cap < left - 20 ? cap : left - 20))
  if [ "$limit" -lt 20 ]; then
    printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >> "$out/steps.tsv"
    echo "== $name: skipped (${left} s of the budget left)" >&2
    return
  fi
  local cmd=() a
  for a in "$@"; do cmd+=("${a//@LIMIT@/$limit}"); done
  echo "== $name (limit ${limit} s)" >&2
  local s0
  s0=$(date +%s)
  timeout --kill-after=5 $((limit + 20)) "${cmd[@]}" > "$out/$name.jsonl" 2> "$out/$name.err"
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s0))" "$limit" >> "$out/steps.tsv"
  tail -n 2 "$out/$name.err" | sed 's/^/   /' >&2
}

IFS=, read -r -a shape_list <<< "$shapes"
for s in "${shape_list[@]}"; do
  read -r c_exact c_fast c_fast32 _ _ <<< "$(caps "$s")"
  rote=("$bench" --workload "$workload" --shape "$s" --points "$points" --source "$root" --deadline @LIMIT@)
  want exact && step "${s}_rote_exact" "$c_exact" "${rote[@]}" --numerics exact --replay "$out/${s}_replay.jsonl"
  # Without exact among the steps, fast records the replay the peer's steps run.
  fast_replay=()
  want exact || fast_replay=(--replay "$out/${s}_replay.jsonl")
  want fast && step "${s}_rote_fast" "$c_fast" "${rote[@]}" --numerics fast "${fast_replay[@]}"
  want fast_b32 && step "${s}_rote_fast_b32" "$c_fast32" "${rote[@]}" --numerics fast --max-batch 32 \
    --max-step-tokens 1024
done
# A replay left by an earlier call is compressed (below); the peer reads it plain.
for s in "${shape_list[@]}"; do
  if [ ! -s "$out/${s}_replay.jsonl" ] && [ -s "$out/${s}_replay.jsonl.xz" ]; then
    xz -dk "$out/${s}_replay.jsonl.xz"
  fi
  if { want compiled || want default; } && [ ! -s "$out/${s}_replay.jsonl" ]; then
    echo "== ${s}: no replay in $out (rote exact, else rote fast, records it): the peer's steps are skipped" >&2
    printf '%s\tno replay\t0\t0\n' "${s}_peer" >> "$out/steps.tsv"
  fi
done
for s in "${shape_list[@]}"; do
  read -r _ _ _ c_compiled _ <<< "$(caps "$s")"
  want compiled && [ -s "$out/${s}_replay.jsonl" ] &&
    step "${s}_peer_static_compiled" "$c_compiled" "${peer[@]}" --shape "$s" --replay "$out/${s}_replay.jsonl" \
      --mode static_compiled --deadline @LIMIT@
done
for s in "${shape_list[@]}"; do
  read -r _ _ _ _ c_default <<< "$(caps "$s")"
  want default && [ -s "$out/${s}_replay.jsonl" ] &&
    step "${s}_peer_default" "$c_default" "${peer[@]}" --shape "$s" --replay "$out/${s}_replay.jsonl" \
      --mode default --points 1,8 --deadline @LIMIT@
done
# The replays (prompt ids) are large and only the peer reads them.
xz -f "$out"/*_replay.jsonl 2> /dev/null

python3 - "$out" <<'EOF' | tee "$out/summary.md"
import glob, json, os, sys
out = sys.argv[1]
rows = {}  # (shape, N) -> column -> text
cols = ["rote exact", "rote fast", "rote fast b32", "peer default", "peer static compiled"]
names = {"rote_exact": "rote exact", "rote_fast": "rote fast", "rote_fast_b32": "rote fast b32",
         "peer_default": "peer default", "peer_static_compiled": "peer static compiled"}
splits = []
for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    base = os.path.basename(path)[:-6]
    shape, _, kind = base.partition("_")
    if kind not in names:
        continue
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        key = (shape, j.get("points"))
        if j.get("skipped"):
            text = "skipped"
        elif not j.get("complete", True):
            text = "cut"
        else:
            text = "%.2f" % j["seconds"]
        rows.setdefault(key, {})[names[kind]] = text
        if kind.startswith("rote") and j.get("complete") and not j.get("skipped"):
            steps = ""
            if j.get("prefill_steps"):
                steps = " (%d prefill steps of %.0f tokens on average, %.2f sequences a step)" % (
                    j["prefill_steps"], j["prompt_tokens_computed"] / j["prefill_steps"], j.get("mean_batch", 0))
            splits.append("%s %s N=%d: %.2f s, prompt %d tokens (%d computed, cache %.0f%%), generated %d; "
                          "prefill %.0f tok/s, decode %.0f tok/s%s; KV %d MiB; model %.0f s, engine %.0f s" %
                          (shape, names[kind], j["points"], j["seconds"], j["prompt_tokens"],
                           j["prompt_tokens_computed"], 100 * j["prefix_cache_share"], j["generated_tokens"],
                           j["prefill_tok_s"], j["decode_tok_s"], steps, j["kv_cache_mib"], j["model_s"],
                           j["engine_open_s"]))
        if kind.startswith("peer") and not j.get("skipped"):
            splits.append("%s %s N=%d: %s s timed, untimed pass %s s, %s s in all" %
                          (shape, names[kind], j["points"], j.get("seconds"), j.get("untimed_pass_s", "-"),
                           j.get("wall_s")))
order = {"0.5b": 0, "1.5b": 1, "7b": 2}
print("| shape, points | " + " | ".join(c + ", s" for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for key in sorted(rows, key=lambda k: (order.get(k[0], 9), k[1] or 0)):
    print("| %s, %s | " % key + " | ".join(rows[key].get(c, "") for c in cols) + " |")
print()
for s in splits:
    print("- " + s)
EOF
echo
cat "$out/steps.tsv"
