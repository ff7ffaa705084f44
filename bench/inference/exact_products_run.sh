#!/usr/bin/env bash
# The exact profile's batched products on the GPU machine: the equality tests of the product
# tiles, the per-product benchmark (each variant side by side, bits checked), then the whole
# equality suite. Logs go to OUT; summary.txt has each part's exit status.
#
#   bench/inference/exact_products_run.sh OUT [BUILD] [VARIANTS]   (BUILD: build-cuda; VARIANTS: -1,0)
#
# Needs BUILD/tests/inference/inference_cuda_backend_test and
# BUILD/bench/inference/exact_products_bench. About 3 minutes on an H200.
set -u
out=${1:?usage: exact_products_run.sh OUT [BUILD] [VARIANTS]}
build=${2:-build-cuda}
variants=${3:--1,0}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > "$out/card.txt" 2>&1

# Every tile of batched products against the default choice.
timeout 300 "$build/tests/inference/inference_cuda_backend_test" --gtest_filter='LargeBatchTile/*' \
  > "$out/equality.log" 2>&1
echo "equality rc=$?" >> "$out/summary.txt"

# Per product: each CudaTuning::large_batch_tile in VARIANTS.
timeout 300 "$build/bench/inference/exact_products_bench" --variants "$variants" \
  > "$out/products.jsonl" 2> "$out/products.err"
echo "products rc=$?" >> "$out/summary.txt"

# The whole equality suite (its fixture tests read the source tree at the path compiled in).
timeout 300 "$build/tests/inference/inference_cuda_backend_test" > "$out/suite.log" 2>&1
echo "suite rc=$?" >> "$out/summary.txt"
