// The choice among every product kernel of the exact profile (LaunchLinearTyped).
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// product kernels' parts (linear.cuh, tiled_linear.cuh, quad_linear.cuh): not a header of its own.

template <WeightType WT>
cudaError_t LaunchLinearTyped(const LinearArgs& a, const LaunchContext& ctx, cudaStream_t stream) {
  // Tile shapes only change which thread computes an output, never its order of operations.
  // The SiLU epilogue needs gate and up rows (2n, 2n + 1) in one warp: ROWS >= 2.
  const bool silu = a.epilogue == LinearEpilogue::kSiluMul;
  if (a.epilogue == LinearEpilogue::kRopeStore && !CanFuseRope(a, *ctx.tuning)) return cudaErrorInvalidValue;
  if (a.tokens == 1) {
    // Pure weight streams. Matrices of many waves (the lm_head) already stream at the copy
    // bandwidth with the plain tile; the per-layer products are one or two waves and need
    // their loads issued early (GemvKernel).
    const int variant = SeparateKernelVariant(*ctx.tuning);
    const bool many_waves = a.w.rows >= 65536;
    if (variant == 1 || many_waves) {
      if (a.w.rows >= 8192) return LaunchLinearTile<WT, 4, 1>(a, stream);
      if (silu) return LaunchLinearTile<WT, 2, 1>(a, stream);
      return LaunchLinearTile<WT, 1, 1>(a, stream);
    }
    const bool gemv = static_cast<int64_t>(a.w.cols_padded) * 4 <= kGemvMaxSmem;
    if (variant == 2 || !gemv) {
      if (a.w.rows >= 8192) return gemv ? LaunchGemv<WT, 4>(a, stream) : LaunchLinearTile<WT, 4, 1>(a, stream);
      if (silu) return gemv ? LaunchGemv<WT, 2>(a, stream) : LaunchLinearTile<WT, 2, 1>(a, stream);
      return gemv ? LaunchGemv<WT, 1>(a, stream) : LaunchLinearTile<WT, 1, 1>(a, stream);
    }
    if (a.epilogue == LinearEpilogue::kRopeStore) {
      if (TmaGemvSmem<WT, 2>(a) > kTmaGemvMaxSmem) return cudaErrorInvalidValue;
      return LaunchTmaGemv<WT, 2>(a, stream);
    }
    if (a.w.rows >= 8192 && TmaGemvSmem<WT, 4>(a) <= kTmaGemvMaxSmem) return LaunchTmaGemv<WT, 4>(a, stream);
    if (silu && TmaGemvSmem<WT, 2>(a) <= kTmaGemvMaxSmem) return LaunchTmaGemv<WT, 2>(a, stream);
    if (!silu && TmaGemvSmem<WT, 1>(a) <= kTmaGemvMaxSmem) return LaunchTmaGemv<WT, 1>(a, stream);
    return silu ? LaunchGemv<WT, 2>(a, stream) : LaunchGemv<WT, 1>(a, stream);
  }
  // Shared-memory tiles (TiledLinearKernel), in order of operand bytes per FMA (L2 traffic), the
  // first whose grid has at least one block per multiprocessor: up to 8 tokens 64 x 8 (tuning 10
  // skips it), then 32 x 8 with K's classes split over 8 blocks (the few-row matrices of a small
  // batch: o, down, q|k|v; tuning 15 skips it: 25% faster at batch 8), then 32 x 32, 32 x 16,
  // 16 x 16, then for the few-row matrices 16 x 8 with K's classes split over 2 blocks where that
  // gives two blocks per multiprocessor (tuning 12 skips it: its blocks are the only way to more
  // warps per multiprocessor for o and down, 1% faster at 0.5B batch 32), then 16 x 8. They need
  // normalised activations. Splitting K over 4 or 8 blocks for larger batches is not chosen: for
  // the few-row matrices (o, down) it measured slower than the 16-row tiles at batch 32 and 64
  // (0.5B, H100), its stages being too small (4 or 8 classes of a group); lab/cuda/linear.cu keeps
  // those tiles.
  const int64_t sms = MultiprocessorCount();
  const int v = ctx.tuning->large_batch_tile;
  if (a.norm_weight == nullptr && a.epilogue != LinearEpilogue::kRopeStore && (v == -1 || v >= 5)) {
    // Prefill-sized batches: the quad tiles (quad_linear.cuh), a third of TiledLinearKernel's
    // shared-memory reads for the same 32 x 32 tile; by default (-1) only where measured faster.
    const int pv = ctx.tuning->prefill_tile;
    if (a.tokens > 16) {
      if (pv == 1) return LaunchQuadLinear<WT, 8, 16, 4, 1, false>(a, ctx.stats, stream);
      if (pv == 2) return LaunchQuadLinear<WT, 8, 8, 4, 1, false>(a, ctx.stats, stream);
      if (pv == 3) return LaunchQuadLinear<WT, 8, 16, 6, 1, false>(a, ctx.stats, stream);
      if (pv == 4) return LaunchQuadLinear<WT, 8, 16, 3, 2, false>(a, ctx.stats, stream);
      if (pv == 5) return LaunchQuadLinear<WT, 8, 16, 4, 1, true>(a, ctx.stats, stream);
      if (pv == 6) return LaunchQuadLinear<WT, 8, 16, 3, 2, true>(a, ctx.stats, stream);
      if (pv == 7) return LaunchQuadLinear<WT, 8, 8, 4, 1, true>(a, ctx.stats, stream);
    }
    if (a.tokens <= 8 && v != 10 && TiledBlocks<WT, 8, 8, 8, 1, 1>(a) >= sms)
      return LaunchTiledLinear<WT, 8, 8, 8, 1, 1>(a, ctx.stats, stream);
    if (v != 15 && a.tokens <= 8 && TiledBlocks<WT, 8, 1, 4, 1, 8>(a) >= sms && TiledSplitFits<WT, 8, 1, 4, 1, 8>(a))
      return LaunchTiledLinear<WT, 8, 1, 4, 1, 8>(a, ctx.stats, stream);
    if (a.tokens > 16 && TiledBlocks<WT, 8, 16, 4, 2, 1>(a) >= sms)
      return LaunchTiledLinear<WT, 8, 16, 4, 2, 1>(a, ctx.stats, stream);
    if (TiledBlocks<WT, 8, 8, 4, 2, 1>(a) >= sms) return LaunchTiledLinear<WT, 8, 8, 4, 2, 1>(a, ctx.stats, stream);
    if (!silu && a.tokens > 8 && TiledBlocks<WT, 4, 8, 4, 2, 1>(a) >= sms)
      return LaunchTiledLinear<WT, 4, 8, 4, 2, 1>(a, ctx.stats, stream);
    if (v != 12 && !silu && TiledBlocks<WT, 4, 4, 4, 1, 2>(a) >= 2 * sms && TiledSplitFits<WT, 4, 4, 4, 1, 2>(a))
      return LaunchTiledLinear<WT, 4, 4, 4, 1, 2>(a, ctx.stats, stream);
    if (!silu && TiledBlocks<WT, 4, 8, 4, 1, 1>(a) >= sms) return LaunchTiledLinear<WT, 4, 8, 4, 1, 1>(a, ctx.stats, stream);
  }
  if (v == 1) return LaunchLinearTile<WT, 4, 8>(a, stream);
  if (v == 2) return LaunchLinearTile<WT, 4, 16>(a, stream);
  if (v == 0) return LaunchLinearTile<WT, 8, 8>(a, stream);
  // Largest register tile that still gives every multiprocessor 16 warps: the canonical order
  // forbids splitting K beyond the 32 lanes, so parallelism comes from outputs alone.
  const int64_t want = 16 * sms;
  auto warps = [&](int rows, int toks) {
    return ((a.w.rows + rows - 1) / rows) * static_cast<int64_t>((a.tokens + toks - 1) / toks);
  };
  if (a.tokens >= 8 && warps(4, 8) >= want) return LaunchLinearTile<WT, 4, 8>(a, stream);
  if (a.tokens >= 4 && warps(4, 4) >= want) return LaunchLinearTile<WT, 4, 4>(a, stream);
  if (a.tokens >= 3) return LaunchLinearTile<WT, 2, 4>(a, stream);
  return LaunchLinearTile<WT, 2, 2>(a, stream);
}
