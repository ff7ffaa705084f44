#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, one after the other, starting from
# its seed corpus in bench/fuzz/corpus/<target>/ (and blueprints/ for the targets that read
# blueprints, lockfiles and run inputs). New inputs and crash files go to a scratch
# folder, never into the tree. Prints per target the inputs run, the seconds, and "crash-free"
# or the crash file; exits non-zero when any target crashed. docs/fuzzing.md explains the rest.
#
#   bench/fuzz/run.sh SECONDS [TARGET...]     SECONDS 0: run the seed corpora only (regression)
#
# Environment:
#   ROTE_FUZZ_BUILD_DIR  the clang build (default build-fuzz; configured here when missing)
#   ROTE_FUZZ_NO_BUILD   1: use the build as it is (built by the caller)
#   ROTE_FUZZ_WORK       scratch folder (default: a new temporary one, kept when a target crashed)
#   ROTE_FUZZ_ARGS       more libFuzzer flags for every target (e.g. "-jobs=2 -workers=2")
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: bench/fuzz/run.sh SECONDS [TARGET...]" >&2
  exit 2
fi
budget=$1
shift
BUILD_DIR="${ROTE_FUZZ_BUILD_DIR:-build-fuzz}"

all_targets=()
for d in bench/fuzz/corpus/*/; do all_targets+=("$(basename "$d")"); done
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

if [ "${ROTE_FUZZ_NO_BUILD:-0}" != 1 ]; then
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DROTE_FUZZ=ON \
      -DROTE_CUDA=OFF -DROTE_TESTS=OFF -DROTE_BENCH=OFF -DROTE_WERROR=OFF >/dev/null
  fi
  cmake --build "$BUILD_DIR" --target "${targets[@]/#/fuzz_}"
fi

WORK="${ROTE_FUZZ_WORK:-$(mktemp -d -t rote-fuzz.XXXXXX)}"
mkdir -p "$WORK"
if command -v llvm-symbolizer >/dev/null; then export ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer)"; fi
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=0
summary=()
for t in "${targets[@]}"; do
  bin="$BUILD_DIR/bench/fuzz/fuzz_$t"
  corpus="bench/fuzz/corpus/$t"
  if [ ! -x "$bin" ] || [ ! -d "$corpus" ]; then
    echo "run.sh: no target '$t' (have: ${all_targets[*]})" >&2
    exit 2
  fi
  mkdir -p "$WORK/$t/new" "$WORK/$t/crashes"
  args=(-artifact_prefix="$WORK/$t/crashes/" -print_final_stats=1 -timeout=30 -rss_limit_mb=2048)
  [ -f "bench/fuzz/dict/$t.dict" ] && args+=(-dict="bench/fuzz/dict/$t.dict")
  if [ "$budget" -eq 0 ]; then
    args+=(-runs=0)
  else
    args+=(-max_total_time="$budget")
  fi
  # shellcheck disable=SC2086  # ROTE_FUZZ_ARGS is a list of flags
  args+=(${ROTE_FUZZ_ARGS:-})
  log="$WORK/$t/log"
  echo "== fuzz_$t (${budget}s)"
  start=$(date +%s)
  seeds=("$corpus")
  # The shipped blueprints, lockfiles and sample inputs seed the targets that read such files.
  case "$t" in blueprint|lockfile|json) seeds+=(blueprints) ;; esac
  # The first folder receives new inputs; the seed folders are only read.
  if "$bin" "${args[@]}" "$WORK/$t/new" "${seeds[@]}" >"$log" 2>&1; then
    result="crash-free"
  else
    result="CRASH: $(grep -o 'Test unit written to .*' "$log" | tail -1 | sed 's/Test unit written to //')"
    [ "$result" = "CRASH: " ] && result="FAILED (see $log)"
    failed=1
    grep -E 'ERROR: |runtime error|invariant violated|SUMMARY' "$log" | head -5 || true
  fi
  secs=$(( $(date +%s) - start ))
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  summary+=("$(printf '%-16s %10s runs %5ss  %s' "$t" "${runs:-?}" "$secs" "$result")")
done

echo
echo "fuzz summary (${budget}s a target; scratch: $WORK)"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "run.sh: a target crashed; reproduce with: $BUILD_DIR/bench/fuzz/fuzz_TARGET CRASH_FILE" >&2
  exit 1
fi
[ -z "${ROTE_FUZZ_WORK:-}" ] && rm -rf "$WORK"
exit 0
