#!/usr/bin/env bash
# The main job: sets up a fresh machine, builds, and runs the demo on the embedded defaults
# (a SQLite file under ./rote-data, the blueprints in blueprints/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR="${ROTE_BUILD_DIR:-build}"
exec "$BUILD_DIR/cli/rote" demo --data "${ROTE_DATA:-rote-data}" --blueprints blueprints "$@"
