#!/usr/bin/env bash
# Installs every Debian package rote needs (idempotent: apt-get runs only when something is
# missing; clang, its libFuzzer runtime and llvm-symbolizer are for the fuzz build of
# bench/fuzz), then configures and builds into build/ (override with ROTE_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  liblua5.4-dev lua5.4 libsqlite3-dev sqlite3 libre2-dev libspdlog-dev
  libgtest-dev libgmock-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libssl-dev
  libseccomp-dev prometheus-cpp-dev grep openssl
  clang libclang-rt-dev llvm
  libpq-dev postgresql
)
# The review console (web/, docs/review.md): an HTTP library, Node.js and npm to build its
# TypeScript (the build runs `npm ci` on the locked packages), chromium for its browser tests.
PACKAGES+=(libcpp-httplib-dev chromium)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

BUILD_DIR="${ROTE_BUILD_DIR:-build}"
BUILD_TYPE="${ROTE_BUILD_TYPE:-RelWithDebInfo}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${ROTE_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)"
