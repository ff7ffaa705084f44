#!/usr/bin/env bash
# Plants one violation of each rule in a scratch git repository and checks that
# scripts/lint_tree.sh names it; then checks a clean repository passes.
#   lint_tree_selftest.sh PATH_TO_LINT_TREE_SH
set -euo pipefail
lint="$1"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
git init -q .
mkdir -p inference/cuda store docs bench
printf '// The store.\nint Answer() { return 42; }\n' > store/ok.cc
printf '# Store\nWhat it does.\n' > docs/store.md
git add -A

expect_clean() {
  if ! out="$(bash "$lint" "$scratch" 2>&1)"; then
    echo "FAIL: a clean tree was reported: $out"; exit 1
  fi
}
# expect_violation FILE CONTENT PATTERN: writes FILE, expects the lint to fail naming PATTERN.
expect_violation() {
  local file="$1" content="$2" pattern="$3"
  mkdir -p "$(dirname "$file")"
  printf '%s' "$content" > "$file"
  if out="$(bash "$lint" "$scratch" 2>&1)"; then
    echo "FAIL: $file passed the lint"; exit 1
  fi
  if ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $file: expected '$pattern' in: $out"; exit 1
  fi
  rm -f "$file"
  expect_clean
}

expect_clean
expect_violation docs/perf.md $'Measured in the twelfth session.\n' "narrates"
expect_violation docs/perf.md $'Copy hf_peer.py (not committed) there.\n' "narrates"
expect_violation store/x.cc $'// see /work/main/build\n' "path of a developer"
expect_violation inference/cuda/cuda_backend.h $'void SetTileForTesting(int v);\n' "setter"
expect_violation inference/cuda/k.cu $'namespace rote {\nint g_variant = 0;\n}\n' "mutable file-scope"
expect_violation inference/cuda/k.cu $'static std::atomic<int64_t> g_launches{0};\n' "mutable file-scope"
long_file="$(for i in $(seq 1 901); do echo "// line $i"; done)"
expect_violation store/long.cc "$long_file"$'\n' "901 lines"
long_fn="int Long() {"$'\n'"$(for i in $(seq 1 200); do echo "  x += $i;"; done)"$'\n}\n'
expect_violation bench/long.cc "$long_fn" "function Long is 202 lines"
member_fn="class A {"$'\n'"  void Member() {"$'\n'"$(for i in $(seq 1 200); do echo "    x += $i;"; done)"$'\n  }\n};\n'
expect_violation orchestrator/a.cc "$member_fn" "function Member is 202 lines"
expect_violation store/y.cc $'#include "sandbox/value.h"\n' "includes a module above"
expect_violation cli/z.cc $'#include "inference/engine.h"\n' "includes a module above"
# Allowed: constants and device tables in inference/cuda/, short functions.
printf 'constexpr int kTile = 8;\n__constant__ float kTable[4];\nstatic const int kRows = 2;\n' > inference/cuda/k.cu
expect_clean
echo "lint_tree_selftest: every planted violation was reported"
