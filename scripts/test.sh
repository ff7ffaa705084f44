#!/usr/bin/env bash
# The test command: sets up a fresh machine, builds, runs the whole suite through ctest, then
# the fuzz smoke.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${ROTE_BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600 "$@"
# Fuzz smoke (docs/fuzzing.md): every parser's libFuzzer target for a few seconds, from its seed
# corpus, in a separate clang build under ASan and UBSan, so the targets never rot.
bash bench/fuzz/run.sh "${ROTE_FUZZ_SMOKE_SECONDS:-3}"
