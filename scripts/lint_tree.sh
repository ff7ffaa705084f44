#!/usr/bin/env bash
# Checks the rules the tree keeps (docs/architecture.md, "Rules the tree keeps"); ctest runs it as
# TreeLint. Prints every violation as FILE:LINE: rule, and exits 1 if there is any.
#
#   scripts/lint_tree.sh [REPO_ROOT]
#
# 1. Text speaks of the project: no narration of how it was worked on ("session"), no paths of a
#    developer's machine, no scripts said to live outside the tree.
# 2. The CUDA backend's header has no test or benchmark setters, and inference/cuda/ has no
#    mutable file-scope variables (device-constant tables are const or __constant__).
# 3. Modules stay readable: no source file in inference/, orchestrator/, store/ or sandbox/ above
#    900 lines; no function there or in cli/, bench/ and lab/ above 200 lines (those listed in
#    LONG_FUNCTIONS_OK, each with why, excepted).
# 4. Includes follow the dependency rule (docs/architecture.md): a folder never includes the
#    headers of a folder above it or beside it.
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root" || exit 2
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "lint_tree: $root is not a git work tree" >&2
  exit 2
fi

MAX_FILE_LINES=900
MAX_FUNCTION_LINES=200
# name|why: functions allowed past MAX_FUNCTION_LINES.
LONG_FUNCTIONS_OK=(
  "FastStreamKernel|one kernel over a ring of weight tiles streamed past resident activations; kept whole so its machine code stays as measured (docs/cuda.md, Files)"
)

failures=0
fail() { echo "$1"; failures=$((failures + 1)); }

# Tracked files plus new ones not ignored, so a check before committing sees them too.
mapfile -t files < <(git ls-files --cached --others --exclude-standard | sort -u)
text_files=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in
    scripts/lint_tree.sh|tests/tree/lint_tree_selftest.sh) continue ;;   # name the patterns banned
    *.png|*.jpg|*.ico|*.bin|*.safetensors|*.db) continue ;;
    bench/fuzz/corpus/*) continue ;;     # fuzz inputs are bytes, not prose
  esac
  grep -Iq . "$f" 2>/dev/null && text_files+=("$f")
done

# 1. Narration and machine paths.
while IFS= read -r hit; do
  fail "$hit: narrates how the project was worked on (say what the code does and why)"
done < <(grep -nHiE '\bsessions?\b|\bnot committed\b|\bdevcarry\b' "${text_files[@]}" 2>/dev/null)
while IFS= read -r hit; do
  fail "$hit: a path of a developer's machine"
done < <(grep -nHE '(^|[^A-Za-z0-9_.])/(work|home|root)/[A-Za-z0-9_]|/tmp/team' "${text_files[@]}" 2>/dev/null)

# 2. The CUDA backend carries only what ships.
if [ -f inference/cuda/cuda_backend.h ]; then
  while IFS= read -r hit; do
    fail "inference/cuda/cuda_backend.h:$hit: a test or benchmark setter in the backend's header"
  done < <(grep -nE 'For(Testing|Benchmark)\b' inference/cuda/cuda_backend.h)
fi
for f in inference/cuda/*.cu inference/cuda/*.cc inference/cuda/*.cuh inference/cuda/*.h; do
  [ -f "$f" ] || continue
  # A declaration at file scope (column 0, or inside a namespace at column 0) of a variable that
  # is neither const, constexpr nor __constant__, and is not a function or a type.
  while IFS= read -r hit; do
    fail "$f:$hit: a mutable file-scope variable (state belongs to a backend instance)"
  done < <(awk '
    /^[ \t]*\/\// { next }
    /^(static |inline |thread_local |__device__ |std::atomic)/ || /^(int|bool|float|double|unsigned|size_t|int32_t|int64_t|uint32_t|uint64_t|std::[a-z_:<>, 0-9]+) +[A-Za-z_][A-Za-z0-9_]*( *=[^=].*)?;[ \t]*(\/\/.*)?$/ {
      line = $0
      if (line ~ /const|constexpr|__constant__|\(|^static_assert|^using |^typedef |^(struct|class|enum|namespace) /) next
      if (line !~ /;[ \t]*(\/\/.*)?$/) next
      print NR ": " line
    }' "$f")
done

# 3. File and function lengths.
for f in "${files[@]}"; do
  case "$f" in
    inference/*|orchestrator/*|store/*|sandbox/*) module=1 ;;
    cli/*|bench/*|lab/*) module="" ;;
    *) continue ;;
  esac
  case "$f" in
    *.cc|*.h|*.cu|*.cuh) ;;
    *) continue ;;
  esac
  [ -f "$f" ] || continue
  n=$(wc -l < "$f")
  if [ -n "$module" ] && [ "$n" -gt "$MAX_FILE_LINES" ]; then
    fail "$f: $n lines (at most $MAX_FILE_LINES; split it along what it holds)"
  fi
  # A function defined at column 0 (or at two spaces, inside a class body) runs from its first
  # line ending in "{" to the next "}" at the same indentation (the project's formatting); its
  # name is the identifier before the first "(" once attributes are dropped.
  for indent in "" "  "; do
    while IFS='|' read -r start len name; do
      ok=""
      for entry in "${LONG_FUNCTIONS_OK[@]}"; do
        [ "${entry%%|*}" = "$name" ] && ok=1
      done
      [ -n "$ok" ] || fail "$f:$start: function $name is $len lines (at most $MAX_FUNCTION_LINES)"
    done < <(awk -v max="$MAX_FUNCTION_LINES" -v ind="$indent" '
      function fname(s,   t) {
        t = s; gsub(/__launch_bounds__\([^)]*\)/, "", t); sub(/\(.*/, "", t); gsub(/.*[ \t*&]/, "", t); return t
      }
      BEGIN { head = "^" ind "[A-Za-z_~]"; close_re = "^" ind "}" }
      start == 0 && $0 ~ head && /\)[^;]*\{[ \t]*$/ && $0 !~ /^[ \t]*(namespace|struct|class|enum|union|extern|if|for|while|switch|return|else|do)[ (]/ {
        start = NR; name = fname($0); next
      }
      start == 0 && $0 ~ head && /\($/ && $0 !~ /^[ \t]*(namespace|struct|class|enum|union|extern|if|for|while|switch|return)[ (]/ {
        pending = NR; pname = fname($0); next
      }
      start == 0 && pending > 0 && /\)[^;]*\{[ \t]*$/ { start = pending; name = pname; pending = 0; next }
      start == 0 && pending > 0 && /;[ \t]*$/ { pending = 0 }
      start > 0 && $0 ~ close_re {
        if (NR - start + 1 > max) print start "|" (NR - start + 1) "|" name
        start = 0
      }' "$f")
  done
done

# 4. Include direction: FOLDER|the includes it must never have.
INCLUDE_RULES=(
  'store/|sandbox/|inference/|orchestrator/|cli/|rote/v1/'
  'sandbox/|store/|inference/|orchestrator/|cli/|rote/v1/'
  'inference/|store/|sandbox/|orchestrator/|cli/|rote/v1/'
  'orchestrator/engine/|orchestrator/generate/|orchestrator/api/|orchestrator/server|orchestrator/offline|inference/|cli/'
  'orchestrator/generate/|orchestrator/api/|orchestrator/server|orchestrator/offline|cli/'
  'orchestrator/|cli/'
  'cli/|store/|sandbox/|inference/|orchestrator/engine/|orchestrator/generate/|orchestrator/api/'
)
for rule in "${INCLUDE_RULES[@]}"; do
  folder="${rule%%|*}"
  banned="${rule#*|}"
  for f in "${files[@]}"; do
    case "$f" in "$folder"*) ;; *) continue ;; esac
    case "$f" in *.cc|*.h|*.cu|*.cuh) ;; *) continue ;; esac
    [ -f "$f" ] || continue
    while IFS= read -r hit; do
      fail "$f:$hit: includes a module above or beside $folder (docs/architecture.md, dependency rule)"
    done < <(grep -nE "^#include \"($banned)" "$f")
  done
done

if [ "$failures" -gt 0 ]; then
  echo "lint_tree: $failures violation(s)"
  exit 1
fi
echo "lint_tree: clean (${#text_files[@]} text files)"
