// The CUDA backend's tuning: the choices its kernels make that change only speed, never a bit of
// any result. One immutable value per backend (CudaBackendOptions::tuning); the defaults are what
// ships, each with the evidence that chose it. Tests run the same steps under other values and
// compare bits (tests/inference/cuda_backend_test.cc). Choices that would change the fast
// profile's bits (its K slices) are not here: they are a profile's definition (fast_shapes.h).
// The variants that no default reaches live in the kernel lab (lab/cuda/).
//
// Plain C++17 (the kernels' .cu files include it); no CUDA.
#pragma once

#include <cstdint>

namespace rote::inference {

struct CudaTuning {
  // --- Exact profile, one token (kernels.h, LaunchLinear / LaunchMlpBlock / LaunchDecodeStep).
  // 0: chosen by size: weights brought into shared memory by bulk copies where they fit, the o,
  // gate|up and down products as one persistent launch and the whole step as one launch where
  // gate|up exceeds one wave of shared memory (1.5B +8% on an H100, 0.5B -15%: docs/performance.md).
  // 1: the plain register tile; 2: the register ring issued before the previous kernel ends;
  // 3: the ring of weights, activations and norm weights (RingGemvKernel; fp32 weights and the
  // lm_head take 1), its rows a warp and depth below, the rotary store fused into q|k|v;
  // 5: bulk copies, the o/gate|up/down products always one launch; 6: never; 7: the whole step as
  // one launch wherever it can run; 8: as 0 but never one launch; 9: as 7 with the fire-and-forget
  // grid barrier; 10: as 7 with the producer copying through grid barriers.
  int one_token_kernel = 0;
  // Models of at least this hidden size take the ring (3) where one_token_kernel is 0 (0:
  // never). The one-launch step does not run at these sizes, and the bulk-copy paths stream the
  // larger rows slower. Qwen2.5-Coder batch 1 on an H200, fraction of copy bandwidth, side by side
  // (docs/performance.md, "Sizes"): 7B 0.37 with every bulk-copy variant, 0.65 with the plain tile
  // (1), 0.84 with the ring; 14B 0.56 -> 0.86; 32B 0.62 -> 0.93. At 1.5B (the one-launch step)
  // and 0.5B (bulk copies) the ring measured 7% and 12% slower than their defaults.
  int one_token_ring_from_hidden = 3072;
  // The ring's rows a warp for the products other than gate|up (which takes 4; the rotary
  // store at least 2): 1, 2 or 4; and its depth, the groups each lane keeps in flight (4, 8 or
  // 16; at most 8 with 4 rows or a fused norm).
  // 7B on an H200, tok/s (rows:depth): 1:4 252.2, 2:8 247.2, 1:16 245.8, 4:8 235.6, 1:8 234.0,
  // 2:16 232.9; 14B 1:4 129.4, 1:8 121.3, 2:4 119.6.
  int one_token_ring_rows = 1;
  int one_token_ring_depth = 4;
  // The most warps per block of the one-token o/gate|up/down launch (16, 8 or 4): 16, the most
  // the ring allows, fewer being used where a warp would not get two ring slots.
  int mlp_block_max_warps = 16;
  // Weight reads hinted L2 evict_first, so the weight stream stops evicting what later kernels
  // read again (K/V rows, activations, norm weights).
  bool weight_evict_first = true;
  // Tiles ahead of its shared-memory ring that the one-launch step's producer asks L2 for
  // weights: 0, the ring itself runs far enough ahead (further prefetch measured no faster).
  int step_prefetch_tiles = 0;

  // --- Exact profile, batches of more than one token (kernels.h, LaunchLinear).
  // -1: the shared-memory tile of fewest operand bytes per FMA whose grid fills the
  // multiprocessors, else the register tile by size. 0: register tile 8 rows x 8 tokens per warp,
  // 1: 4 x 8, 2: 4 x 16; 4: never the shared-memory tile; 10: the default without its 64 x 8
  // tile, 12: without the 2-way split 16 x 8 tile, 15: without the 8-way split 32 x 8 tile.
  int large_batch_tile = -1;

  // --- Attention (kernels.h, LaunchAttention), both profiles.
  // -1: by grid size (LaunchAttention's rule); 0: plain loops, rows of earlier steps prefetched
  // into L1; 2: loops that issue 8 positions' loads (4 at head_dim > 128) before using them;
  // 5: batches of 2 positions; 9: every K/V row of the head in shared memory; 10: the query heads
  // of a KV head in one block, in parts leaving about one block per multiprocessor; 11: as 10 in
  // as few parts as the threads allow.
  int attention_variant = -1;
  // Steps of at least this many tokens (0: never) whose attention needs no window and no soft cap
  // run it in query tiles (attention_tile.cuh: several consecutive tokens of a sequence and
  // every query head of a KV head share each staged K/V row), where their tiles are mostly full
  // (at most twice the step's tokens in tile rows). Same bits.
  int attention_tile_min_tokens = 64;
  // Blocks of that kernel a multiprocessor holds: 1 (registers unbounded: 255 a thread) or 2 (128
  // a thread). 7B fast prefill, H200, 1 -> 2: one prompt of 1,024 tokens 46.5k -> 48.9k tok/s
  // (layers 4), of 3,000 33.2k -> 37.4k.
  int attention_tile_blocks_per_sm = 2;
  // The measured rule (kernels.h, AttentionTilesPay): head_dim 128 only, and only where the
  // tiles' blocks fill the device once. H200, other kernels -> tiles: 1.5B exact, one prompt of
  // 256 tokens (104 blocks on 132 multiprocessors) 11.5k -> 9.8k tok/s; 0.5B fast (head_dim 64),
  // 1,024 tokens 58.2k -> 47.5k. Off: wherever the kernel can run (tests).
  bool attention_tile_by_rule = true;
  // From how many positions one token's attention runs each head in 8 (4, 2) blocks over parts
  // of its positions, in the one-launch step (per step; 0: never). 192: at 1.5B batch 1 (H200)
  // even at 128-200 positions, +3% at 192-264, -4% at 64-136.
  int step_attention_split = 192;
  // The same for separate launches, per context bucket (every context of the bucket must reach
  // it; 0: never). 512: 0.5B batch 1 (H100) against one block per head, -6% at 256-328
  // positions, -1% at 512-584, +7% at 1,000-1,072.
  int attention_parts_min_context = 512;
  // Blocks per head of those parts: 8, 4 or 2 where heads x that many fit the grid; 0: 8 or 4,
  // the most that fit (2 is slower than no split).
  int attention_parts = 0;
  // Those parts as their own launch (separate launches, one token): the V positions' loads each
  // thread keeps in flight, 4, 16 per class (and 8 or 16 scores
  // positions, 8 of the weights' scores), or 32 over all of its classes at once, read through L2
  // only. The order of every sum is the same. Batch 1 at 2,000 positions, H200, 4 -> 32 side by
  // side (`cuda_bench --prompt 2000 --attention-parts-v-loads 4,32`): 7B fast 154.5 -> 164.2
  // tok/s, 7B exact 164.0 -> 174.5, 0.5B fast 965 -> 1,103, 0.5B exact 736 -> 915-935
  // (docs/performance.md, "The generation workload"). The one-launch step always takes 32.
  int attention_parts_v_loads = 32;
  // Late blocks (kernels.h, LatePrefetchEarlyBlocks): how many blocks of the fast profile's
  // gate|up and of grouped attention ask L2 for later blocks' first reads. -1: a quarter of the
  // multiprocessors for steps of 17 to 64 tokens (batches of 1 and 8 measured slower with it),
  // none otherwise; 0: none; N: the first N.
  int late_prefetch_blocks = -1;

  // --- Fast profile (fast_linear.h). Block shapes never enter the order of the sums.
  // 16-row tiles per block (1 to 6; 0: by the wave model of fast_shapes.h; above 4, blocks of
  // more than 16 tokens take 16) and the most token rows per block (8, 16 or 32; 0: up to 32).
  int fast_row_tiles = 0;
  int fast_token_tile = 0;
  // Products of at most this many K slices (2 or 3) of at most this many steps per warp run them
  // in one block instead of a cluster (merged slices; 0 or 1: always a cluster; negative: the
  // defaults of fast_shapes.h, kFastMergeMaxSlices and kFastMergeMaxStepsPerWarp).
  int fast_merge_max_slices = -1;
  int fast_merge_max_steps_per_warp = -1;
  // Products with the norm stage its weights in shared memory before their wait (where they fit
  // beside two blocks' rings) instead of reading them from global memory at every step.
  bool fast_norm_staged = true;
  // Where weights stream past activations held in shared memory (FastStreamKernel): 0 never,
  // 1 matrices of at least 8 x 64 rows per multiprocessor (the lm_head: each weight read once per
  // 32 tokens instead of twice through L2), 2 wherever it can run; and the 16-row tiles per warp's
  // unit for 32-token tiles (2 or 3; 0: 3).
  int fast_stream_mode = 1;
  int fast_stream_row_tiles = 0;
  // The q|k|v product applies rotary and stores k and v itself (models without q/k norms),
  // sparing a launch per layer, instead of leaving them to the rotary kernel.
  bool fast_rope_fused = true;
  // Products of at least this many tokens (0: none) run on wgmma (fast_wgmma.cuh: the activations
  // split once, 128-token tiles, the same bits) where the backend gave them scratch: by default the
  // unsliced ones of at least fast_wgmma_min_cols columns, in blocks of 1 warpgroup (two a
  // multiprocessor: as fast as 4 where the grid fills the card, faster where a step of few tiles
  // does not; docs/fast_profile.md). Warpgroups 1 to 4 run every product of that many tokens on
  // wgmma, in blocks of that many (3 and 4 only the unsliced ones; the others take 2).
  int fast_wgmma_min_tokens = 128;
  int fast_wgmma_min_cols = 2048;
  int fast_wgmma_warpgroups = 0;
  // Blocks of 1 warpgroup in clusters of this many (1, 2 or 4) row blocks, each step's pieces
  // multicast to the cluster (fast_wgmma.cuh): L2 reads of the pieces divided by it.
  int fast_wgmma_cluster = 1;

  // --- Sampling (sampling.h). 0: every column sorted; 1: the candidate path where the rules
  // allow it; 2: as 1, then every column sorted again as after an overflow (its fallback).
  int sample_candidates = 1;
};

// What one backend launched since it was created (a captured graph counts once, when captured):
// tests check that the variant they ask for did run.
struct CudaLaunchStats {
  int64_t decode_steps = 0;               // steps run as one DecodeStepKernel
  int64_t decode_steps_in_parts = 0;      // of those, launched with the attention-in-parts code
  int64_t tiled_linear_launches = 0;      // TiledLinearKernel launches
  int64_t ring_gemv_launches = 0;        // RingGemvKernel launches (one-token products)
  int64_t attention_parts_launches = 0;   // LaunchAttentionParts launches
  int64_t attention_tile_launches = 0;    // LaunchTileAttention launches
  int64_t late_prefetch_launches = 0;     // launches whose first blocks prefetched for late ones
  int64_t fast_linear_launches = 0;       // fast-profile products
  int64_t fast_merged_launches = 0;       // of those, with merged slices
  int64_t fast_norm_staged_launches = 0;  // of those, FastLinearKernel staging its norm weights
  int64_t fast_stream_launches = 0;       // of those, FastStreamKernel
  int64_t fast_wgmma_launches = 0;        // of those, FastWgmmaKernel
};

}  // namespace rote::inference
