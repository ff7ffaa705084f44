#!/usr/bin/env bash
# The exact profile's batched products on the GPU machine: the CUDA equality tests of the
# product tiles, the per-product benchmark (every kernel variant side by side, bits checked),
# prefill end to end with and without the quad tile, then the whole equality suite. Logs go to
# OUT; summary.txt has each part's exit status.
#
#   bench/inference/exact_products_run.sh OUT [BUILD] [VARIANTS]   (BUILD: build-cuda; VARIANTS: 0,1,2,3,4,5,6,7)
#
# Needs BUILD/tests/inference/inference_cuda_backend_test, BUILD/bench/inference/exact_products_bench
# and BUILD/bench/inference/cuda_bench. About 5 minutes on an H200.
set -u
out=${1:?usage: exact_products_run.sh OUT [BUILD] [VARIANTS]}
build=${2:-build-cuda}
variants=${3:-0,1,2,3,4,5,6,7}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > "$out/card.txt" 2>&1

# The quad tiles against the CPU, and every other tile against the default choice.
timeout 300 "$build/tests/inference/inference_cuda_backend_test" --gtest_filter='PrefillTile/*:LargeBatchTile/*' \
  > "$out/equality.log" 2>&1
echo "equality rc=$?" >> "$out/summary.txt"

# Per product: each CudaTuning::prefill_tile (0: the tiles without the quad tile).
timeout 300 "$build/bench/inference/exact_products_bench" --variants "$variants" \
  > "$out/products.jsonl" 2> "$out/products.err"
echo "products rc=$?" >> "$out/summary.txt"

# Prefill of 1,000-token prompts (1 and several prompts): the quad tile off (0) and on (1).
for shape in 0.5b 1.5b; do
  for tile in 0 1; do
    timeout 150 "$build/bench/inference/cuda_bench" --shape "$shape" --dir "/tmp/rote_synth_$shape" --steps 8 \
      --batches 1 --prefill 1 --prefill-tile "$tile" > "$out/prefill_${shape}_$tile.jsonl" 2>&1
    echo "prefill $shape $tile rc=$?" >> "$out/summary.txt"
  done
done

# The whole equality suite (its fixture tests read the source tree at the path compiled in).
timeout 300 "$build/tests/inference/inference_cuda_backend_test" > "$out/suite.log" 2>&1
echo "suite rc=$?" >> "$out/summary.txt"
