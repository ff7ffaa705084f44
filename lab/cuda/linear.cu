// Kernel lab: the exact profile's matrix products (lab/cuda/README.md).
//
// Version 1 is production: cuda::LaunchLinear with the default tuning. The others are kernels and
// tiles that no default reaches, kept here with the reason they lost:
//   2  TiledLinearKernel 32 x 32, K's classes split over 4 blocks: slower than the 16-row tiles
//      for the few-row matrices (o, down) at batch 32 and 64, its stages being too small
//   3  TiledLinearKernel 16 x 16, K split over 8 blocks: as 2
//   4  TiledLinearKernel 32 x 32 in blocks of 4 warps (two per multiprocessor): slower
//   5  the largest tile (32 x 32) forced, 6 the smallest (16 x 8), 7 64 x 8, 8 32 x 8 with K
//      split over 8 blocks: production's tiles outside the sizes where the rule picks them
//   9  one token: StreamGemvKernel, a persistent grid whose warps keep a ring of bulk copies in
//      flight; the bulk-copy kernel that requests whole slices before its wait (production)
//      streams the per-layer matrices faster, and the plain tile streams the lm_head as fast
// Each version's outputs are compared bit for bit with the canonical dot product
// (inference/numerics/canonical.h) on the host, then timed; the weights' bytes over the time
// against the card's copy bandwidth is the ceiling that bounds a product of few tokens.
//
//   linear_lab [rows cols tokens]   (default: the 0.5B shapes' o, gate|up and down at 1, 8, 32)
#include "inference/cuda/kernels.cu"  // production's kernels: version 1 and the tiles below

#include <array>
#include <functional>
#include <string>
#include <utility>

#include "lab/cuda/lab_common.h"

namespace rote::inference::cuda {
namespace {

// One-token products of large matrices as a stream: a persistent grid (one block per
// multiprocessor) in which every warp owns the row tiles w, w + W, w + 2W, ... (W warps in all)
// and keeps a ring of `stages` tiles in flight through bulk copies, each completing on its own
// mbarrier. Lane 0 refills a stage as soon as the warp has read it, so a multiprocessor always
// has about stages x 4 tiles of the matrix requested, whatever the matrix's size, and the
// first `stages` tiles are requested before the kernel waits for the previous one. Each tile
// is a whole row band, so every output is still one warp's canonical dot product: the same
// bits as every other kernel here.
// (kStreamMaxStages: linear.cuh.)

template <WeightType WT, int ROWS>
__global__ void __launch_bounds__(kThreads) StreamGemvKernel(LinearArgs a, int32_t stages) {
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  extern __shared__ __align__(128) unsigned char stream_smem[];
  __shared__ __align__(8) uint64_t bars[kWarps][kStreamMaxStages];
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.w.cols, KP = a.w.cols_padded;
  const int groups = KP / kGroupCols;
  const int64_t row_bytes = static_cast<int64_t>(KP) * kWeightBytes<WT>;
  const int64_t tile_bytes = ROWS * row_bytes;
  const int tiles = (a.w.rows + ROWS - 1) / ROWS;
  const int stride = gridDim.x * kWarps;
  const int first = blockIdx.x * kWarps + warp;
  unsigned char* ring = stream_smem + static_cast<int64_t>(warp) * stages * tile_bytes;
  float4* xs = reinterpret_cast<float4*>(stream_smem + static_cast<int64_t>(kWarps) * stages * tile_bytes);
  const char* wbase = static_cast<const char*>(a.w.data);
  auto request = [&](int tile, int stage) {
    const int r0 = tile * ROWS;
    const uint32_t bytes = static_cast<uint32_t>(min(ROWS, a.w.rows - r0) * row_bytes);
    MbarExpectTx(&bars[warp][stage], bytes);
    BulkCopyToShared(ring + stage * tile_bytes, wbase + r0 * row_bytes, bytes, &bars[warp][stage]);
  };
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) MbarInit(&bars[warp][s], 1);
    FenceMbarInit();
    for (int s = 0; s < stages; ++s)
      if (first + s * stride < tiles) request(first + s * stride, s);
  }
  WaitForPrevious();  // weights are constant; x, x_rows and out come from earlier work

  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride);
  for (int i = threadIdx.x; i < groups * 32; i += kThreads) xs[i] = xg[i];
  __syncthreads();  // also publishes the barrier initialisation to every lane
  if (a.norm_weight != nullptr) {
    const float ss = LaneRowSumSquares<>(xs, groups, lane);
    const float r = canonical_rms_scale(WarpTree(ss), K, a.norm_eps);
    const float4* nw = reinterpret_cast<const float4*>(a.norm_weight);
    __syncthreads();  // every warp has its sum of squares before x is overwritten
    for (int i = threadIdx.x; i < groups * 32; i += kThreads) xs[i] = NormScale(xs[i], r, nw[i]);
    __syncthreads();
  }

  int it = 0;
  for (int tile = first; tile < tiles; tile += stride, ++it) {
    const int stage = it % stages;
    MbarWait(&bars[warp][stage], static_cast<uint32_t>((it / stages) & 1));
    float acc[ROWS];
    SharedBandDot<WT, ROWS>(ring + stage * tile_bytes, row_bytes, xs, groups, lane, nullptr, 0.0f, acc);
    // Every lane has consumed the stage (its FMAs used every value it read), so it can be refilled.
    __syncwarp();
    if (lane == 0 && tile + stages * stride < tiles) request(tile + stages * stride, stage);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
    StoreOneToken<ROWS>(a, a.epilogue, acc, tile * ROWS, lane);
  }
}

// Shared memory of the streaming kernel's weight ring, per block (one block per multiprocessor,
// room left for the neighbouring kernels' blocks to become resident early).
constexpr int64_t kStreamRingBytes = 128 * 1024;

template <WeightType WT, int ROWS>
int StreamStages(const LinearArgs& a) {
  const int64_t tile_bytes = int64_t{ROWS} * a.w.cols_padded * kWeightBytes<WT>;
  return static_cast<int>(std::min<int64_t>(kStreamMaxStages, kStreamRingBytes / (kWarps * tile_bytes)));
}

template <WeightType WT, int ROWS>
cudaError_t LaunchStreamGemv(const LinearArgs& a, cudaStream_t stream) {
  const int stages = StreamStages<WT, ROWS>(a);
  if (stages < 1) return cudaErrorInvalidValue;
  const int64_t smem = int64_t{kWarps} * stages * ROWS * a.w.cols_padded * kWeightBytes<WT> +
                       int64_t{a.w.cols_padded} * sizeof(float);
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(StreamGemvKernel<WT, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kStreamRingBytes + 64 * 1024));
  });
  if (prepared != cudaSuccess) return prepared;
  if (smem > kStreamRingBytes + 64 * 1024) return cudaErrorInvalidValue;
  const int tiles = (a.w.rows + ROWS - 1) / ROWS;
  const int blocks = std::min((tiles + kWarps - 1) / kWarps, MultiprocessorCount());
  return LaunchChained(StreamGemvKernel<WT, ROWS>, dim3(blocks), dim3(kThreads), static_cast<size_t>(smem), stream, a,
                       stages);
}


}  // namespace
}  // namespace rote::inference::cuda

namespace {

using rote::inference::CudaTuning;
using namespace rote::inference::cuda;
namespace lab = rote::lab;

struct Product {
  int32_t rows, cols, cols_padded, tokens;
  std::vector<float> w;  // (rows, cols) fp32 values of the bf16 weights
  std::vector<float> x;  // (tokens, cols)
  LinearArgs args;
  std::vector<float> reference;  // (tokens, rows): canonical dot products
};

Product Make(int32_t rows, int32_t cols, int32_t tokens) {
  Product p{rows, cols, static_cast<int32_t>(PaddedCols(cols)), tokens, {}, {}, {}, {}};
  const std::vector<uint16_t> wb = lab::RandomBf16(int64_t{rows} * cols, 1);
  p.w.resize(wb.size());
  for (size_t i = 0; i < wb.size(); ++i) p.w[i] = rote::numerics::bf16_to_f32(wb[i]);
  p.x = lab::RandomFloats(int64_t{tokens} * cols, 2);
  p.args.w.data = lab::UploadLaneRows(wb.data(), rows, cols, p.cols_padded, 2);
  p.args.w.type = WeightType::kBF16;
  p.args.w.rows = rows;
  p.args.w.cols = cols;
  p.args.w.cols_padded = p.cols_padded;
  p.args.x = static_cast<const float*>(lab::UploadLaneRows(p.x.data(), tokens, cols, p.cols_padded, 4));
  p.args.x_stride = p.cols_padded;
  p.args.tokens = tokens;
  p.args.epilogue = LinearEpilogue::kStore;
  float* out = nullptr;
  LAB_CHECK(cudaMalloc(&out, sizeof(float) * tokens * rows));
  p.args.out = out;
  p.args.out_stride = rows;
  // The split tiles' scratch and tickets, as the backend sizes them.
  constexpr int64_t kTickets = 256, kScratch = kTickets * 32 * 32 * 32;
  LAB_CHECK(cudaMalloc(&p.args.split_scratch, sizeof(float) * kScratch));
  LAB_CHECK(cudaMalloc(&p.args.split_tickets, sizeof(uint32_t) * kTickets));
  LAB_CHECK(cudaMemset(p.args.split_tickets, 0, sizeof(uint32_t) * kTickets));
  p.args.split_scratch_floats = kScratch;
  p.args.split_tickets_count = kTickets;
  p.reference.resize(static_cast<size_t>(tokens) * rows);
  for (int32_t m = 0; m < tokens; ++m)
    for (int32_t n = 0; n < rows; ++n)
      p.reference[static_cast<size_t>(m) * rows + n] = rote::numerics::canonical_dot(
          p.w.data() + static_cast<int64_t>(n) * cols, p.x.data() + static_cast<int64_t>(m) * cols, cols);
  return p;
}

void Run(const Product& p, int version, const char* what, const std::function<cudaError_t()>& launch, double bw) {
  LAB_CHECK(cudaMemset(p.args.out, 0xff, sizeof(float) * p.tokens * p.rows));
  const cudaError_t e = launch();
  if (e != cudaSuccess) {
    std::printf("{\"what\":\"linear\",\"version\":%d,\"kernel\":\"%s\",\"rows\":%d,\"cols\":%d,\"tokens\":%d,"
                "\"runs\":false,\"cuda\":\"%s\"}\n",
                version, what, p.rows, p.cols, p.tokens, cudaGetErrorString(e));
    cudaGetLastError();
    return;
  }
  LAB_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(p.reference.size());
  LAB_CHECK(cudaMemcpy(got.data(), p.args.out, sizeof(float) * got.size(), cudaMemcpyDeviceToHost));
  const int64_t diff = lab::FirstDifference(got, p.reference);
  const double s = lab::TimePerCall([&] { launch(); });
  const double weight_bytes = 2.0 * p.rows * p.cols_padded;
  const double flops = 2.0 * p.rows * p.cols * p.tokens;
  std::printf("{\"what\":\"linear\",\"version\":%d,\"kernel\":\"%s\",\"rows\":%d,\"cols\":%d,\"tokens\":%d,"
              "\"equals_cpu_reference\":%s,\"first_difference\":%lld,\"us\":%.2f,\"weights_TBps\":%.3f,"
              "\"fraction_of_copy_bandwidth\":%.3f,\"TFLOPs\":%.3f}\n",
              version, what, p.rows, p.cols, p.tokens, diff < 0 ? "true" : "false", static_cast<long long>(diff),
              1e6 * s, weight_bytes / s / 1e12, weight_bytes / s / bw, flops / s / 1e12);
  std::fflush(stdout);
}

void Versions(const Product& p, double bw) {
  const CudaTuning tuning;
  const LaunchContext ctx{&tuning, nullptr};
  const LinearArgs& a = p.args;
  constexpr WeightType kB = WeightType::kBF16;
  Run(p, 1, "production", [&] { return LaunchLinear(a, ctx, nullptr); }, bw);
  if (p.tokens == 1) {
    const int stages = StreamStages<kB, 1>(a);
    Run(p, 9, "stream_gemv", [&] { return stages >= 1 ? LaunchStreamGemv<kB, 1>(a, nullptr) : cudaErrorInvalidValue; }, bw);
    return;
  }
  Run(p, 2, "tiled_32x32_k4", [&] { return LaunchTiledLinear<kB, 8, 4, 4, 2, 4>(a, nullptr, nullptr); }, bw);
  Run(p, 3, "tiled_16x16_k8", [&] { return LaunchTiledLinear<kB, 4, 4, 8, 1, 8>(a, nullptr, nullptr); }, bw);
  Run(p, 4, "tiled_32x32_4warps", [&] { return LaunchTiledLinear<kB, 8, 16, 2, 2, 1>(a, nullptr, nullptr); }, bw);
  Run(p, 5, "tiled_32x32", [&] { return LaunchTiledLinear<kB, 8, 16, 4, 2, 1>(a, nullptr, nullptr); }, bw);
  Run(p, 6, "tiled_16x8", [&] { return LaunchTiledLinear<kB, 4, 8, 4, 1, 1>(a, nullptr, nullptr); }, bw);
  Run(p, 7, "tiled_64x8", [&] { return LaunchTiledLinear<kB, 8, 8, 8, 1, 1>(a, nullptr, nullptr); }, bw);
  Run(p, 8, "tiled_32x8_k8", [&] { return LaunchTiledLinear<kB, 8, 1, 4, 1, 8>(a, nullptr, nullptr); }, bw);
}

}  // namespace

int main(int argc, char** argv) {
  double bw = 0;
  if (!lab::Start(&bw)) return 1;
  for (const auto& [rows, cols, tokens] : lab::ProductShapes(argc, argv)) Versions(Make(rows, cols, tokens), bw);
  return 0;
}
