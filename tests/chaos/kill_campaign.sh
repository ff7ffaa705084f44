#!/usr/bin/env bash
# Kill campaign: SIGKILLs a real `rote serve` at random moments while concurrent clients submit
# runs of the shipped blueprints, restarts it on the same data directory each time, and then
# checks what the server acknowledged: every acknowledged run exists and reaches a terminal state,
# resubmitting its request id returns the same run, the database passes integrity_check (after
# every kill, on a copy of what the crash left, and at the end), and every succeeded run replays
# equal. Prints the figures and exits non-zero on any lost or stuck run, integrity failure,
# duplicate, refused submission or replay mismatch. docs/crash_safety.md explains the results.
#
#   tests/chaos/kill_campaign.sh [--kills 25] [--submitters 8] [--min-delay-ms 200]
#       [--max-delay-ms 3000] [--seed N] [--rote PATH] [--work NEW_DIR] [--keep]
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KILLS=25
SUBMITTERS=8
MIN_DELAY_MS=200
MAX_DELAY_MS=3000
SEED=$(( $(date +%s) % 32768 ))
ROTE="${ROTE:-$ROOT/build/cli/rote}"
WORK=""
KEEP=0
SETTLE_S=120

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) KILLS="$2"; shift 2 ;;
    --submitters) SUBMITTERS="$2"; shift 2 ;;
    --min-delay-ms) MIN_DELAY_MS="$2"; shift 2 ;;
    --max-delay-ms) MAX_DELAY_MS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --rote) ROTE="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) echo "kill_campaign: unknown argument $1" >&2; usage ;;
  esac
done
for n in "$KILLS" "$SUBMITTERS" "$MIN_DELAY_MS" "$MAX_DELAY_MS" "$SEED"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "kill_campaign: numbers expected, got '$n'" >&2; exit 2; }
done
[ "$MAX_DELAY_MS" -ge "$MIN_DELAY_MS" ] || { echo "kill_campaign: --max-delay-ms < --min-delay-ms" >&2; exit 2; }
[ -x "$ROTE" ] || { echo "kill_campaign: no rote binary at $ROTE (pass --rote PATH)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "kill_campaign: needs the sqlite3 command" >&2; exit 2; }

# A work directory given with --work must be new or empty (a campaign never reuses data) and is
# kept; one made here is removed at the end unless --keep.
if [ -z "$WORK" ]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/rote-kill-campaign.XXXXXX")"
else
  [ ! -e "$WORK" ] || [ -z "$(ls -A "$WORK")" ] || { echo "kill_campaign: --work $WORK is not empty" >&2; exit 2; }
  KEEP=1
fi
mkdir -p "$WORK"/{data,inputs,acked,check,results}
DATA="$WORK/data"
DB="$DATA/rote.db"
RANDOM=$SEED
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
seconds_since() { local ms=$(( $(now_ms) - $1 )); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
START_MS=$(now_ms)
SERVER_PID=""
SUBMITTER_PIDS=()

log() { printf '[%9ss] %s\n' "$(seconds_since "$START_MS")" "$*"; }

cleanup() {
  touch "$WORK/stop"
  for p in "${SUBMITTER_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  if [ -n "$SERVER_PID" ]; then kill -KILL -- "-$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi
  if [ "$KEEP" = 0 ]; then rm -rf "$WORK"; else echo "kill_campaign: kept $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the server -------------------------------------------------------------------------------
PORT=0
STARTS=0
# Starts `rote serve` in its own process group (so that what it leaves behind can be counted),
# waits for its "listening" line and records the port; the same port on every restart, as a
# client configured with one address would expect.
start_server() {
  STARTS=$((STARTS + 1))
  local logf="$WORK/server.$STARTS.log" t0 i
  t0=$(now_ms)
  setsid "$ROTE" serve --listen "127.0.0.1:$PORT" --data "$DATA" --metrics-listen off --http-listen off \
    --log-level warn >"$logf" 2>&1 &
  SERVER_PID=$!
  for i in $(seq 1 600); do
    if grep -q "rote: listening on port" "$logf"; then
      PORT=$(sed -n 's/^rote: listening on port \([0-9]*\)$/\1/p' "$logf" | head -1)
      echo "127.0.0.1:$PORT" >"$WORK/server.tmp" && mv "$WORK/server.tmp" "$WORK/server"
      LAST_START_S=$(seconds_since "$t0")
      return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
    sleep 0.05
  done
  echo "kill_campaign: the server did not start (start $STARTS); its log:" >&2
  tail -n 30 "$logf" >&2
  return 1
}

# The database as the crash left it (file, WAL; no shared-memory index, which SQLite rebuilds),
# checked on a copy so that the next start still recovers the original itself.
crash_state_integrity() {
  rm -f "$WORK"/check/*
  cp "$DB" "$WORK/check/rote.db"
  [ -f "$DB-wal" ] && cp "$DB-wal" "$WORK/check/rote.db-wal"
  sqlite3 "$WORK/check/rote.db" 'PRAGMA integrity_check' 2>&1 | tr '\n' ' ' | sed 's/ $//'
}

# --- workload ---------------------------------------------------------------------------------
# Inputs of the three shipped blueprints, with variations so that runs differ: access_log with
# every `top` from 1 to 10 and a long log (the sample's lines 200 times, about 380 KB: an input
# stored as a blob file, and a run long enough for kills to land inside it), contacts with four
# default countries, invoice_totals as shipped.
BP_DIR="$ROOT/blueprints"
for top in $(seq 1 10); do
  sed "s/\"top\": 5/\"top\": $top/" "$BP_DIR/access_log.sample.json" >"$WORK/inputs/access_log.top$top.json"
done
# The sample holds one log line per line of the file, between `"lines": [` and a line `  ]`.
lines=$(awk '/^  \]/ { on = 0 } on { sub(/,$/, ""); print } /"lines": \[/ { on = 1 }' "$BP_DIR/access_log.sample.json")
{
  echo '{"top": 10, "lines": ['
  for i in $(seq 1 200); do echo "$lines"; done | sed '$! s/$/,/'
  echo ']}'
} >"$WORK/inputs/access_log.long.json"
for c in US GB DE FR; do
  sed "s/\"default_country\": \"US\"/\"default_country\": \"$c\"/" "$BP_DIR/contacts.sample.json" \
    >"$WORK/inputs/contacts.$c.json"
done
cp "$BP_DIR/invoice_totals.sample.json" "$WORK/inputs/invoice_totals.json"
mapfile -t INPUTS < <(cd "$WORK/inputs" && ls)

rote_cli() { "$ROTE" "$@" --server "$(cat "$WORK/server")" --timeout 20; }

# One client: submits runs with unique request ids; a submission that fails is retried with the
# same request id until the server acknowledges it (the retry after a crash is the idempotency
# attack: the first attempt may have been committed without an answer). Records each
# acknowledgment as "request_id run_name input", and anything but unavailability as a refusal.
submitter() {
  local w=$1 seq=0 rid input bp out rc name tries
  RANDOM=$((SEED + w * 7919))
  while [ ! -e "$WORK/stop" ]; do
    seq=$((seq + 1))
    rid="kc-$w-$seq"
    input=${INPUTS[$((RANDOM % ${#INPUTS[@]}))]}
    bp=${input%%.*}
    tries=0
    while :; do
      tries=$((tries + 1))
      out=$(rote_cli runs submit "$bp" --input-file "$WORK/inputs/$input" --request-id "$rid" --json 2>"$WORK/acked/err.$w")
      rc=$?
      if [ $rc -eq 0 ]; then
        name=$(grep -o '"name": "runs/[0-9]*"' <<<"$out" | head -1 | cut -d'"' -f4)
        echo "$rid $name $input" >>"$WORK/acked/$w"
        [ $tries -gt 1 ] && echo "$rid" >>"$WORK/acked/retried.$w"
        break
      fi
      # 3: unavailable or no answer in time (the server is down or dying); 8: another error of
      # the call itself, kept for the figures. Anything else is the server refusing the request.
      if [ $rc -eq 8 ]; then
        echo "$rid $(tr '\n' ' ' <"$WORK/acked/err.$w")" >>"$WORK/acked/internal.$w"
      elif [ $rc -ne 3 ]; then
        echo "$rid rc=$rc $(tr '\n' ' ' <"$WORK/acked/err.$w")" >>"$WORK/acked/refused.$w"
        break
      fi
      # The final phase needs every request acknowledged, so a stop ends the retries only once
      # the server has been up for a while.
      if [ -e "$WORK/stop" ] && [ -e "$WORK/final" ] && [ $tries -gt 100 ]; then
        echo "$rid" >>"$WORK/acked/abandoned.$w"
        break
      fi
      sleep 0.05
    done
  done
}

# --- setup ------------------------------------------------------------------------------------
log "seed $SEED, $KILLS kills, $SUBMITTERS submitters, delays ${MIN_DELAY_MS}-${MAX_DELAY_MS} ms, work dir $WORK"
start_server || exit 1
for bp in access_log contacts invoice_totals; do
  if ! rote_cli blueprints register "$BP_DIR/$bp.lua" >"$WORK/register.$bp.log" 2>&1; then
    echo "kill_campaign: registering $bp failed:" >&2; cat "$WORK/register.$bp.log" >&2; exit 1
  fi
done
log "server up on port $PORT; blueprints registered"
for w in $(seq 1 "$SUBMITTERS"); do
  submitter "$w" &
  SUBMITTER_PIDS+=($!)
done

acked_count() { cat "$WORK"/acked/[0-9]* 2>/dev/null | wc -l; }

# --- the campaign -----------------------------------------------------------------------------
CRASH_INTEGRITY_FAILURES=0
LEFTOVER_PROCESSES=0
for k in $(seq 1 "$KILLS"); do
  delay_ms=$((MIN_DELAY_MS + ((RANDOM << 15 | RANDOM) % (MAX_DELAY_MS - MIN_DELAY_MS + 1))))
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -KILL "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null
  now_ms >>"$WORK/kill_times_ms"
  # Sandbox workers die with the server (PR_SET_PDEATHSIG); anything of its group still running
  # a moment later (not a zombie waiting for its reaper) was left behind.
  sleep 0.2
  left=$(ps -e -o pgid=,stat= | awk -v g="$SERVER_PID" '$1 == g && $2 !~ /^Z/' | wc -l)
  if [ "$left" -gt 0 ]; then
    LEFTOVER_PROCESSES=$((LEFTOVER_PROCESSES + left))
    kill -KILL -- "-$SERVER_PID" 2>/dev/null
  fi
  integrity=$(crash_state_integrity)
  [ "$integrity" = "ok" ] || CRASH_INTEGRITY_FAILURES=$((CRASH_INTEGRITY_FAILURES + 1))
  if ! start_server; then
    echo "kill_campaign: FAILED: the server did not restart after kill $k" >&2
    exit 1
  fi
  log "kill $k/$KILLS after ${delay_ms} ms: $(acked_count) runs acknowledged so far; crash state integrity: $integrity; restarted in ${LAST_START_S}s"
done

# --- after the last restart -------------------------------------------------------------------
touch "$WORK/final" "$WORK/stop"
for p in "${SUBMITTER_PIDS[@]}"; do wait "$p"; done
SUBMITTER_PIDS=()
cat "$WORK"/acked/[0-9]* 2>/dev/null | sort -u >"$WORK/acked.all"
ACKED=$(wc -l <"$WORK/acked.all")
RETRIED=$(cat "$WORK"/acked/retried.* 2>/dev/null | wc -l)
REFUSED=$(cat "$WORK"/acked/refused.* 2>/dev/null | wc -l)
INTERNAL=$(cat "$WORK"/acked/internal.* 2>/dev/null | wc -l)
ABANDONED=$(cat "$WORK"/acked/abandoned.* 2>/dev/null | wc -l)
log "submitters stopped: $ACKED runs acknowledged ($RETRIED after a retry), $REFUSED refused, $ABANDONED abandoned"

# Splits the acknowledged runs into 4 shards and runs CHECK on each line in parallel; each result
# line goes to results/<check>.<shard>.
PARALLEL=4
parallel_over_acked() {
  local check=$1 s pids=()
  rm -f "$WORK/results/$check".*
  for s in $(seq 0 $((PARALLEL - 1))); do
    awk -v s="$s" -v p="$PARALLEL" 'NR % p == s' "$WORK/acked.all" | while read -r rid name input; do
      "$check" "$rid" "$name" "$input"
    done >"$WORK/results/$check.$s" &
    pids+=($!)
  done
  wait "${pids[@]}"  # not a bare wait: the server is a child too
  cat "$WORK/results/$check".*
}

# Final state of one run: "<name> <STATE> <interrupted|->", or "<name> LOST <exit code>".
final_state() {
  local out rc state
  out=$(rote_cli runs get "$2" --json 2>&1); rc=$?
  if [ $rc -ne 0 ]; then echo "$2 LOST $rc"; return; fi
  state=$(grep -o '"state": "RUN_STATE_[A-Z]*"' <<<"$out" | head -1 | cut -d'"' -f4)
  state=${state#RUN_STATE_}
  # A crash's recovery and a graceful stop word their interruptions differently.
  if grep -q '"error": "\(interrupted\|the server shut down\)' <<<"$out"; then echo "$2 $state interrupted"; else echo "$2 $state -"; fi
}

deadline=$(( $(date +%s) + SETTLE_S ))
while :; do
  parallel_over_acked final_state >"$WORK/final_states"
  not_terminal=$(awk '$2 == "PENDING" || $2 == "RUNNING"' "$WORK/final_states" | wc -l)
  [ "$not_terminal" -eq 0 ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then break; fi
  log "$not_terminal acknowledged runs not finished yet; waiting"
  sleep 2
done
LOST=$(awk '$2 == "LOST"' "$WORK/final_states" | wc -l)
STUCK=$(awk '$2 == "PENDING" || $2 == "RUNNING"' "$WORK/final_states" | wc -l)
SUCCEEDED=$(awk '$2 == "SUCCEEDED"' "$WORK/final_states" | wc -l)
FAILED_INTERRUPTED=$(awk '$2 == "FAILED" && $3 == "interrupted"' "$WORK/final_states" | wc -l)
FAILED_OTHER=$(awk '$2 == "FAILED" && $3 != "interrupted"' "$WORK/final_states" | wc -l)
CANCELLED=$(awk '$2 == "CANCELLED"' "$WORK/final_states" | wc -l)
log "final states: $SUCCEEDED succeeded, $FAILED_INTERRUPTED failed as interrupted, $FAILED_OTHER failed otherwise, $CANCELLED cancelled, $STUCK stuck, $LOST lost"

# Resubmitting a request id returns the run first acknowledged for it.
resubmit() {
  local out rc name bp=${3%%.*}
  out=$(rote_cli runs submit "$bp" --input-file "$WORK/inputs/$3" --request-id "$1" --json 2>&1); rc=$?
  name=$(grep -o '"name": "runs/[0-9]*"' <<<"$out" | head -1 | cut -d'"' -f4)
  if [ $rc -eq 0 ] && [ "$name" = "$2" ]; then echo "same $1"; else echo "DIFFERENT $1 $2 -> ${name:-rc=$rc}"; fi
}
parallel_over_acked resubmit >"$WORK/resubmits"
RESUBMIT_DIFFERENT=$(grep -c '^DIFFERENT' "$WORK/resubmits")
log "resubmitted every request id: $((ACKED - RESUBMIT_DIFFERENT)) same run, $RESUBMIT_DIFFERENT different"

# Replay: succeeded runs must match; an interrupted run has nothing complete to compare, and a
# replay that refuses it (an error, not a verdict) is counted apart from mismatches.
replay() {
  local line state note out rc
  line=$(grep -m1 "^$2 " "$WORK/final_states")
  state=$(cut -d' ' -f2 <<<"$line"); note=$(cut -d' ' -f3 <<<"$line")
  [ "$state" = "SUCCEEDED" ] || [ "$note" = "interrupted" ] || return 0
  out=$(rote_cli runs replay "$2" --json 2>&1); rc=$?
  if [ "$state" = "SUCCEEDED" ]; then
    if [ $rc -eq 0 ]; then echo "equal $2"
    elif [ $rc -eq 1 ]; then echo "MISMATCH $2 $(tr '\n' ' ' <<<"$out")"
    else echo "ERROR $2 rc=$rc $(tr '\n' ' ' <<<"$out")"; fi
  else
    if [ $rc -eq 0 ]; then echo "interrupted-equal $2"
    elif [ $rc -eq 1 ]; then echo "interrupted-mismatch $2 $(tr '\n' ' ' <<<"$out")"
    else echo "interrupted-refused $2 rc=$rc $(tr '\n' ' ' <<<"$out")"; fi
  fi
}
parallel_over_acked replay >"$WORK/replays"
REPLAY_EQUAL=$(grep -c '^equal ' "$WORK/replays")
REPLAY_MISMATCH=$(grep -c '^MISMATCH ' "$WORK/replays")
REPLAY_ERROR=$(grep -c '^ERROR ' "$WORK/replays")
INTERRUPTED_REFUSED=$(grep -c '^interrupted-refused ' "$WORK/replays")
INTERRUPTED_OTHER=$(grep -c '^interrupted-\(equal\|mismatch\) ' "$WORK/replays")
log "replayed: $REPLAY_EQUAL equal, $REPLAY_MISMATCH mismatched, $REPLAY_ERROR errors; interrupted runs: $INTERRUPTED_REFUSED refused, $INTERRUPTED_OTHER replayed"

# Graceful stop, then the database itself: integrity, foreign keys, one run per request id.
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"; STOP_RC=$?
SERVER_PID=""
INTEGRITY=$(sqlite3 "$DB" 'PRAGMA integrity_check' 2>&1 | tr '\n' ' ' | sed 's/ $//')
FK_VIOLATIONS=$(sqlite3 "$DB" 'PRAGMA foreign_key_check' 2>&1 | wc -l)
DUPLICATES=$(sqlite3 "$DB" "SELECT count(*) FROM (SELECT 1 FROM runs WHERE request_id LIKE 'kc-%' GROUP BY submitter, request_id HAVING count(*) > 1)")
RUNS_IN_DB=$(sqlite3 "$DB" "SELECT count(*) FROM runs WHERE request_id LIKE 'kc-%'")
# Runs created before a kill and started after it were queued when the server died: the next
# start took them up again. (Times from the server's clock, on this machine.)
KILL_VALUES=$(sed 's/.*/(&)/' "$WORK/kill_times_ms" | paste -sd,)
REQUEUED=$(sqlite3 "$DB" "WITH kills(t) AS (VALUES $KILL_VALUES)
  SELECT count(*) || ' (' || coalesce(sum(state = 'succeeded'), 0) || ' succeeded)' FROM runs r
  WHERE request_id LIKE 'kc-%' AND EXISTS (SELECT 1 FROM kills WHERE r.create_ms < t AND r.start_ms > t)")
WALL_S=$(seconds_since "$START_MS")

cat <<EOF

kill campaign figures (seed $SEED)
  kills:                         $KILLS (server starts: $STARTS)
  submitters:                    $SUBMITTERS
  runs acknowledged:             $ACKED ($RETRIED acknowledged only after a retry of the same request id)
  runs in the database:          $RUNS_IN_DB
  submissions refused:           $REFUSED
  attempts with internal errors: $INTERNAL (retried)
  requests abandoned:            $ABANDONED
  queued at a kill, run later:   $REQUEUED
  final states:                  succeeded $SUCCEEDED, failed (interrupted) $FAILED_INTERRUPTED, failed (other) $FAILED_OTHER, cancelled $CANCELLED
  lost:                          $LOST
  stuck (pending/running):       $STUCK
  resubmit gave another run:     $RESUBMIT_DIFFERENT
  duplicate runs per request id: $DUPLICATES
  crash-state integrity fails:   $CRASH_INTEGRITY_FAILURES of $KILLS
  processes left after kills:    $LEFTOVER_PROCESSES
  final integrity_check:         $INTEGRITY
  foreign key violations:        $FK_VIOLATIONS
  replays of succeeded runs:     equal $REPLAY_EQUAL, mismatch $REPLAY_MISMATCH, error $REPLAY_ERROR
  replays of interrupted runs:   refused $INTERRUPTED_REFUSED, replayed $INTERRUPTED_OTHER
  graceful stop exit code:       $STOP_RC
  wall time:                     ${WALL_S}s
EOF

failures=()
[ "$LOST" -eq 0 ] || failures+=("$LOST lost")
[ "$STUCK" -eq 0 ] || failures+=("$STUCK stuck")
[ "$REFUSED" -eq 0 ] || failures+=("$REFUSED refused submissions")
[ "$ABANDONED" -eq 0 ] || failures+=("$ABANDONED abandoned requests")
[ "$RESUBMIT_DIFFERENT" -eq 0 ] || failures+=("$RESUBMIT_DIFFERENT resubmissions gave another run")
[ "$DUPLICATES" = 0 ] || failures+=("$DUPLICATES duplicated request ids")
[ "$CRASH_INTEGRITY_FAILURES" -eq 0 ] || failures+=("$CRASH_INTEGRITY_FAILURES crash states failed integrity_check")
[ "$INTEGRITY" = "ok" ] || failures+=("final integrity_check: $INTEGRITY")
[ "$FK_VIOLATIONS" -eq 0 ] || failures+=("$FK_VIOLATIONS foreign key violations")
[ "$REPLAY_MISMATCH" -eq 0 ] || failures+=("$REPLAY_MISMATCH replay mismatches")
[ "$REPLAY_ERROR" -eq 0 ] || failures+=("$REPLAY_ERROR replay errors")
[ "$ACKED" -gt 0 ] || failures+=("no run was acknowledged")
[ "$STOP_RC" -eq 0 ] || failures+=("graceful stop exited $STOP_RC")
if [ ${#failures[@]} -gt 0 ]; then
  echo "kill_campaign: FAILED: $(IFS=';'; echo "${failures[*]}")"
  awk '$2 == "LOST" || $2 == "PENDING" || $2 == "RUNNING"' "$WORK/final_states" | head -5
  grep -h '^\(DIFFERENT\|MISMATCH\|ERROR\) ' "$WORK/resubmits" "$WORK/replays" | head -5
  cat "$WORK"/acked/refused.* 2>/dev/null | head -5
  exit 1
fi
echo "kill_campaign: PASSED"
