#!/usr/bin/env bash
# GPU check of generation (docs/generation.md "GPU check"): the same run with 20 generation
# points served on two devices (default CUDA, then the CPU), each with its own data directory
# (the device is not part of the request digest, so one store would answer the second run from
# the first one's failed-generation records). A synthesized model has random weights, so every
# point ends as a failed generation whose attempts are recorded; for every point, every attempt's
# prompt digest and raw output digest must be the same on both devices.
#
# Usage: tools/gpu_generation_check.sh
#   ROTE_BIN     folder holding rote and rote-sandbox-worker (default: this script's folder);
#                a lib/ folder beside them is put on LD_LIBRARY_PATH
#   SHAPE        model shape for `rote model synth` (default 0.5b; tiny for a quick CPU check)
#   DEVICES      the two devices, in order (default "cuda cpu"; "cpu cpu" checks the script)
#   UNECHO       1 (default): rescale the synthesized model so greedy output is not an echo
#                (see below)
#   ATTEMPTS, MAX_TOKENS   rote serve --attempts / --max-tokens (default 2 / 48)
#   PHASE_TIMEOUT_A, PHASE_TIMEOUT_B   seconds the first / second serve phase may take
#                (default 180 / 360: the CPU is the slow one)
#   OUT          where logs, event streams and the summary go (default /tmp/gpucheck-out)
#   WORK         scratch: model, blueprint, data directories (default /tmp/gpucheck-work)
# Exit 0 only when every attempt matches and both runs recorded 20 points x ATTEMPTS attempts.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROTE_BIN=${ROTE_BIN:-$HERE}
SHAPE=${SHAPE:-0.5b}
DEVICES=${DEVICES:-"cuda cpu"}
ATTEMPTS=${ATTEMPTS:-2}
MAX_TOKENS=${MAX_TOKENS:-48}
PHASE_TIMEOUT_A=${PHASE_TIMEOUT_A:-180}
PHASE_TIMEOUT_B=${PHASE_TIMEOUT_B:-360}
OUT=${OUT:-/tmp/gpucheck-out}
WORK=${WORK:-/tmp/gpucheck-work}
PORT=${PORT:-17981}

ROTE="$ROTE_BIN/rote"
if [[ -d "$ROTE_BIN/lib" ]]; then export LD_LIBRARY_PATH="$ROTE_BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
mkdir -p "$OUT" "$WORK"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[gpucheck] $*" | tee -a "$OUT/summary.txt"; }

log "rote: $ROTE; shape $SHAPE; devices $DEVICES; attempts $ATTEMPTS; max tokens $MAX_TOKENS"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/[gpucheck] gpu: /' |
    tee -a "$OUT/summary.txt" || true
fi
log "cpu: $(nproc) cores"

MODEL="$WORK/model-$SHAPE"
t=$(now)
rm -rf "$MODEL"
"$ROTE" model synth --family qwen2 --shape "$SHAPE" --out "$MODEL" > "$OUT/synth.log" 2>&1
log "model synthesized in $(since "$t")s: $(du -sh "$MODEL" | cut -f1)"

# As synthesized, the model's random layers are small next to its tied embeddings, so greedy
# decoding echoes the prompt's last token: every attempt of every point, on both devices, was 48
# newlines (first GPU run), which makes equal bytes a weak check. With UNECHO=1 (the default) the
# layers' output projections (o_proj, down_proj) are scaled by 8 (exact in bf16: exponent + 3)
# and the embedding rows of ids the tokenizer has no token for are zeroed, so the layers decide
# the next token. On the tiny shape that gives prompt-dependent outputs (14 distinct of 40); on
# the 0.5b shape every output was still one string ('8' x 48), so the summary prints
# distinct_outputs: greedy decoding of random weights stays a weak check. Pure Python.
if [[ ${UNECHO:-1} == 1 ]]; then
  t=$(now)
  env -u LD_LIBRARY_PATH python3 - "$MODEL" <<'PY' | tee -a "$OUT/summary.txt"
import json, struct, sys
d = sys.argv[1]
tok = json.load(open(f"{d}/tokenizer.json"))
used = max([256] + [t["id"] + 1 for t in tok.get("added_tokens", [])])
buf = bytearray(open(f"{d}/model.safetensors", "rb").read())
n = struct.unpack_from("<Q", buf, 0)[0]
header = json.loads(buf[8:8 + n])
base = 8 + n
scaled = 0
for name, t in header.items():
    if name == "__metadata__":
        continue
    assert t["dtype"] == "BF16", (name, t["dtype"])
    b, e = (base + o for o in t["data_offsets"])
    if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
        # +3 on every bf16 exponent: the values are normal and far from overflow, so the
        # exponent fields never carry into the sign bit or the next element.
        v = int.from_bytes(buf[b:e], "little") + int.from_bytes(b"\x80\x01" * ((e - b) // 2), "little")
        buf[b:e] = v.to_bytes(e - b, "little")
        scaled += 1
    elif name == "model.embed_tokens.weight":
        row = 2 * t["shape"][1]
        buf[b + used * row:e] = bytes(e - (b + used * row))
open(f"{d}/model.safetensors", "wb").write(buf)
print(f"[gpucheck] unecho: {scaled} projections scaled by 8, embedding rows {used}.. zeroed")
PY
  log "model adjusted in $(since "$t")s"
fi

# 20 points: 12 Lua functions, 8 RE2 patterns, each with small tests / examples.
BLUEPRINT="$WORK/gpucheck.lua"
cat > "$BLUEPRINT" <<'LUA'
local bp = rote.blueprint { name = "gpucheck", version = "1" }

local points = {}
local function lua(spec) points[#points + 1] = bp:lua(spec) end
local function regex(spec) points[#points + 1] = bp:regex(spec) end

lua { name = "double_it", task = "Return the integer argument times two.",
      signature = "function(n) -> integer", tests = { { 2, 4 }, { -3, -6 } } }
lua { name = "add_pair", task = "Add the two integers a and b of the argument.",
      signature = "function({ a = integer, b = integer }) -> integer",
      tests = { { { a = 1, b = 2 }, 3 }, { { a = -5, b = 5 }, 0 } } }
lua { name = "shout", task = "Upper-case the text and append an exclamation mark.",
      signature = "function(text) -> string", tests = { { "hi", "HI!" }, { "ok go", "OK GO!" } } }
lua { name = "reverse_words", task = "Reverse the order of the space-separated words.",
      signature = "function(text) -> string", tests = { { "a b c", "c b a" }, { "one", "one" } } }
lua { name = "count_vowels", task = "Count the vowels (a, e, i, o, u, any case) in the text.",
      signature = "function(text) -> integer", tests = { { "Banana", 3 }, { "xyz", 0 } } }
lua { name = "is_even", task = "Return true when the integer is even, false otherwise.",
      signature = "function(n) -> boolean", tests = { { 4, true }, { 7, false } } }
lua { name = "max_of_list", task = "Return the largest integer of a non-empty list.",
      signature = "function(list) -> integer", tests = { { { 3, 9, 2 }, 9 }, { { -1 }, -1 } } }
lua { name = "sum_list", task = "Return the sum of a list of integers (0 for an empty list).",
      signature = "function(list) -> integer", tests = { { { 1, 2, 3 }, 6 }, { {}, 0 } } }
lua { name = "trim_text", task = "Remove spaces and tabs at both ends of the text.",
      signature = "function(text) -> string", tests = { { "  a b  ", "a b" }, { "x", "x" } } }
lua { name = "initials", task = "Return the upper-case first letters of the words, joined.",
      signature = "function(text) -> string", tests = { { "ada lovelace", "AL" }, { "Alan M Turing", "AMT" } } }
lua { name = "cents_to_text", task = "Format integer cents as dollars with two decimals, e.g. 1234 -> '12.34'.",
      signature = "function(cents) -> string", tests = { { 1234, "12.34" }, { 5, "0.05" } } }
lua { name = "word_lengths", task = "Return the list of the lengths of the space-separated words.",
      signature = "function(text) -> list of integers", tests = { { "ab c", { 2, 1 } }, { "abc", { 3 } } } }

regex { name = "years", task = "Four-digit years from 1900 to 2099.",
        examples = { { "in 1999 and 2024, not 1850", { "1999", "2024" } }, { "none", {} } } }
regex { name = "invoice_ids", task = "Invoice numbers like INV-2024-0001: INV, a year, four digits.",
        examples = { { "pay INV-2024-0001 now", { "INV-2024-0001" } }, { "INV-24-1", {} } } }
regex { name = "emails", task = "Simple e-mail addresses: letters, digits, dots before and after one @.",
        examples = { { "mail a.b@c.org or x@y.io", { "a.b@c.org", "x@y.io" } }, { "no at sign", {} } } }
regex { name = "hex_colors", task = "CSS hex colours: # and six hex digits.",
        examples = { { "#ff00aa and #123456", { "#ff00aa", "#123456" } }, { "#12", {} } } }
regex { name = "iso_dates", task = "ISO dates YYYY-MM-DD.",
        examples = { { "from 2024-01-31 to 2024-02-01", { "2024-01-31", "2024-02-01" } }, { "2024/01/31", {} } } }
regex { name = "hashtags", task = "Hashtags: # followed by letters or digits.",
        examples = { { "#rote is #fast", { "#rote", "#fast" } }, { "# alone", {} } } }
regex { name = "percentages", task = "Whole-number percentages such as 15%.",
        examples = { { "up 15% then 7%", { "15%", "7%" } }, { "15 percent", {} } } }
regex { name = "capital_words", task = "Words that start with an upper-case letter.",
        examples = { { "Alice met Bob", { "Alice", "Bob" } }, { "all lower", {} } } }

function bp.run(input)
  return { points = #points }
end

return bp
LUA

phase() {
  local dev=$1 tag=$2 limit=$3
  local data="$WORK/data-$tag" server="127.0.0.1:$PORT"
  rm -rf "$data"
  log "phase $tag: rote serve --model $MODEL --device $dev --data $data --attempts $ATTEMPTS --max-tokens $MAX_TOKENS --listen $server --metrics-listen off --review-policy auto"
  local t0
  t0=$(now)
  timeout -s TERM "$limit" "$ROTE" serve --model "$MODEL" --device "$dev" --data "$data" \
    --attempts "$ATTEMPTS" --max-tokens "$MAX_TOKENS" --listen "$server" --metrics-listen off \
    --review-policy auto > "$OUT/serve-$tag.log" 2>&1 &
  local spid=$!
  local up=0
  for _ in $(seq 1 600); do
    if "$ROTE" health --server "$server" > /dev/null 2>&1; then up=1; break; fi
    if ! kill -0 "$spid" 2> /dev/null; then break; fi
    sleep 0.2
  done
  if [[ $up != 1 ]]; then
    log "phase $tag: the server did not come up; its log:"
    tail -20 "$OUT/serve-$tag.log" | tee -a "$OUT/summary.txt"
    kill -TERM "$spid" 2> /dev/null || true
    return 1
  fi
  log "phase $tag: serving after $(since "$t0")s: $(grep -o 'model loaded in.*' "$OUT/serve-$tag.log" | head -1)"
  "$ROTE" blueprints register "$BLUEPRINT" --server "$server" > "$OUT/register-$tag.txt" 2>&1
  local t1 rc=0
  t1=$(now)
  timeout -s TERM "$limit" "$ROTE" runs submit gpucheck --input '{}' --allow-generation --watch --json \
    --server "$server" > "$OUT/events-$tag.json" 2> "$OUT/submit-$tag.err" || rc=$?
  log "phase $tag: run ended after $(since "$t1")s (rote runs submit exit $rc; 1 = the run failed, as expected)"
  kill -TERM "$spid" 2> /dev/null || true
  wait "$spid" || true
  cp "$data/rote.db" "$OUT/store-$tag.db" 2> /dev/null || true
  log "phase $tag: done in $(since "$t0")s"
}

read -r DEV_A DEV_B <<< "$DEVICES"
phase "$DEV_A" "a-$DEV_A" "$PHASE_TIMEOUT_A" || true
phase "$DEV_B" "b-$DEV_B" "$PHASE_TIMEOUT_B" || true

# Compare the failed-generation records (store key-value namespace generation/failed, one per
# request digest) and the events' per-attempt output digests. Python's own SQLite, not the one
# bundled for rote (LD_LIBRARY_PATH), which may be older than Python's module expects.
env -u LD_LIBRARY_PATH python3 - "$OUT/store-a-$DEV_A.db" "$OUT/store-b-$DEV_B.db" "$OUT/events-a-$DEV_A.json" "$OUT/events-b-$DEV_B.json" \
  "$ATTEMPTS" <<'PY' | tee -a "$OUT/summary.txt"
import json, os, re, sqlite3, sys

data_a, data_b, events_a, events_b, attempts = sys.argv[1:6]
attempts = int(attempts)

def records(data):
    if not os.path.exists(data):
        return {}
    db = sqlite3.connect(f"file:{data}?mode=ro", uri=True)
    out = {}
    for key, value in db.execute("SELECT key, value FROM kv WHERE namespace = 'generation/failed' ORDER BY key"):
        rec = json.loads(value)
        point = rec["generation_point"]
        out[point] = {"request": key, "attempts": json.loads(rec["attempts"])}
    return out

def event_outputs(path):
    if not os.path.exists(path):
        return {}
    text, dec, pos, out = open(path).read(), json.JSONDecoder(), 0, {}
    line = re.compile(r"^(\w+): attempt (\d+)/\d+ failed \((\d+) tokens, output (sha256:[0-9a-f]+)\)")
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        ev, pos = dec.raw_decode(text, pos)
        m = line.match(ev.get("generation_progress", ""))
        if m:
            out[(m.group(1), int(m.group(2)))] = (m.group(4), int(m.group(3)))

a, b = records(data_a), records(data_b)
ea, eb = event_outputs(events_a), event_outputs(events_b)
points = sorted(set(a) | set(b))
total = identical = differing = 0
first = None
for p in points:
    ra, rb = a.get(p), b.get(p)
    if ra is None or rb is None:
        differing += 1
        first = first or f"{p}: recorded on one device only"
        continue
    if ra["request"] != rb["request"]:
        first = first or f"{p}: request digests differ: {ra['request']} vs {rb['request']}"
    for i in range(max(len(ra["attempts"]), len(rb["attempts"]))):
        total += 1
        xa = ra["attempts"][i] if i < len(ra["attempts"]) else None
        xb = rb["attempts"][i] if i < len(rb["attempts"]) else None
        same = xa is not None and xb is not None and all(
            xa[k] == xb[k] for k in ("index", "prompt_digest", "output_digest", "failure"))
        if same:
            identical += 1
        else:
            differing += 1
            first = first or f"{p} attempt {i + 1}: {xa} vs {xb}"
# The events must agree with the records they came from.
short = lambda p: p.rsplit("/", 1)[-1]
event_mismatch = 0
for recs, evs in ((a, ea), (b, eb)):
    for p, r in recs.items():
        for at in r["attempts"]:
            got = evs.get((short(p), at["index"]))
            if got is None or got[0] != at["output_digest"]:
                event_mismatch += 1
distinct = len({at["output_digest"] for r in list(a.values()) + list(b.values()) for at in r["attempts"]})
tokens = sorted({t for (_, t) in ea.values()} | {t for (_, t) in eb.values()})
print(f"points={len(points)} attempts={total} identical={identical} differing={differing} "
      f"event_lines={len(ea)}+{len(eb)} event_mismatch={event_mismatch} distinct_outputs={distinct} "
      f"tokens_per_attempt={tokens}")
if points:
    p = points[0]
    print(f"example: {p} request {a[p]['request'] if p in a else '-'}")
    for at in a.get(p, {"attempts": []})["attempts"]:
        print(f"  attempt {at['index']}: prompt {at['prompt_digest']} output {at['output_digest']}: {at['failure'][:100]}")
if first:
    print(f"first difference: {first}")
ok = (len(points) == 20 and total == 20 * attempts and identical == total and differing == 0
      and event_mismatch == 0 and len(ea) == total and len(eb) == total)
print("RESULT: " + ("identical" if ok else "NOT identical"))
sys.exit(0 if ok else 1)
PY
