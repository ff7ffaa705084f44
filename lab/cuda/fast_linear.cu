// Kernel lab: the fast profile's matrix products (lab/cuda/README.md, docs/fast_profile.md).
//
// Version 1 is production: cuda::LaunchFastLinear, whose K slices (FastLinearSplits: about 48 /
// ceil(rows / 64), at least 3 steps per warp) fix the order of the sums and so the profile's bits
// (fast5). The other versions cut K otherwise; they are other profiles, which is why no tuning
// reaches them:
//   2  a target of 32 slices (fast3 and fast4's target)
//   3  a target of 128 slices (fast2's)
//   4  one slice: no cluster, every block runs all of K
// and one ablation, whose bits mean nothing:
//   5  version 1 reading its weights from L2: the tiles' virtual range maps one 8 MiB physical
//      chunk again and again (lab::AliasedCopy), so the kernel runs every instruction it runs in
//      production while DRAM serves almost nothing. Its time against version 1's says how much of
//      a product's time DRAM bandwidth takes.
// Each version is compared with version 1 (equal bits or not: only version 1 is the profile) and
// with the exact profile's canonical dot products (the largest difference over the largest value:
// a few ulps of the logits' scale), then timed against the card's copy bandwidth.
//
//   [LAB_TIMES_ONLY=1] fast_linear_lab [rows cols tokens]   (default: the 0.5B shapes' o, gate|up and down
//   at 1, 8, 32)
#include "inference/cuda/fast_linear.cu"  // production's kernels: version 1 and the shapes below

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "lab/cuda/lab_common.h"

namespace {

using rote::inference::CudaTuning;
using namespace rote::inference::cuda;
namespace lab = rote::lab;

struct Product {
  int32_t rows, cols, cols_padded, tokens;
  LinearArgs args;
  std::vector<float> reference;  // (tokens, rows): canonical dot products
};

Product Make(int32_t rows, int32_t cols, int32_t tokens) {
  Product p{rows, cols, static_cast<int32_t>(PaddedCols(cols)), tokens, {}, {}};
  const std::vector<uint16_t> wb = lab::RandomBf16(int64_t{rows} * cols, 1);
  const std::vector<float> x = lab::RandomFloats(int64_t{tokens} * cols, 2);
  std::vector<uint16_t> lane(static_cast<size_t>(rows) * p.cols_padded, 0);
  for (int32_t r = 0; r < rows; ++r)
    RowToLaneOrder(reinterpret_cast<const uint8_t*>(wb.data() + static_cast<int64_t>(r) * cols), cols, 2,
                   reinterpret_cast<uint8_t*>(lane.data() + static_cast<int64_t>(r) * p.cols_padded));
  const std::vector<uint16_t> tiles = FastTilesOnPool(lane.data(), rows, p.cols_padded, nullptr);
  void* d_tiles = nullptr;
  LAB_CHECK(cudaMalloc(&d_tiles, tiles.size() * sizeof(uint16_t)));
  LAB_CHECK(cudaMemcpy(d_tiles, tiles.data(), tiles.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  p.args.w.fast_tiles = d_tiles;
  p.args.w.type = WeightType::kBF16;
  p.args.w.rows = rows;
  p.args.w.cols = cols;
  p.args.w.cols_padded = p.cols_padded;
  p.args.x = static_cast<const float*>(lab::UploadLaneRows(x.data(), tokens, cols, p.cols_padded, 4));
  p.args.x_stride = p.cols_padded;
  p.args.tokens = tokens;
  p.args.epilogue = LinearEpilogue::kStore;
  float* out = nullptr;
  LAB_CHECK(cudaMalloc(&out, sizeof(float) * tokens * rows));
  p.args.out = out;
  p.args.out_stride = rows;
  std::vector<float> w(static_cast<size_t>(cols));
  p.reference.resize(static_cast<size_t>(tokens) * rows);
  // LAB_TIMES_ONLY=1: no host reference (relative_diff_to_exact then means nothing): only the
  // versions' times and their bits against version 1, for large shapes the host takes long over.
  const char* times_only = std::getenv("LAB_TIMES_ONLY");
  if (times_only != nullptr && std::string(times_only) == "1") return p;
  for (int32_t n = 0; n < rows; ++n) {
    for (int32_t k = 0; k < cols; ++k)
      w[k] = rote::numerics::bf16_to_f32(wb[static_cast<size_t>(n) * cols + k]);
    for (int32_t m = 0; m < tokens; ++m)
      p.reference[static_cast<size_t>(m) * rows + n] =
          rote::numerics::canonical_dot(w.data(), x.data() + static_cast<int64_t>(m) * cols, cols);
  }
  return p;
}

std::vector<float> Output(const Product& p) {
  std::vector<float> out(p.reference.size());
  LAB_CHECK(cudaMemcpy(out.data(), p.args.out, sizeof(float) * out.size(), cudaMemcpyDeviceToHost));
  return out;
}

void Run(const Product& p, int version, const char* what, int32_t splits, const std::function<cudaError_t()>& launch,
         const std::vector<float>* version1, double bw) {
  LAB_CHECK(cudaMemset(p.args.out, 0, sizeof(float) * p.tokens * p.rows));
  LAB_CHECK(launch());
  LAB_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = Output(p);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - p.reference[i]));
    scale = std::max(scale, std::abs(static_cast<double>(p.reference[i])));
  }
  const bool same = version1 == nullptr || lab::FirstDifference(got, *version1) < 0;
  const double t = lab::TimePerCall([&] { launch(); });
  const double weight_bytes = 2.0 * FastTileRowsPadded(p.rows) * p.cols_padded;
  std::printf("{\"what\":\"fast_linear\",\"version\":%d,\"kernel\":\"%s\",\"splits\":%d,\"rows\":%d,\"cols\":%d,"
              "\"tokens\":%d,\"equals_version_1\":%s,\"relative_diff_to_exact\":%.3g,\"us\":%.2f,\"weights_TBps\":%.3f,"
              "\"fraction_of_copy_bandwidth\":%.3f,\"TFLOPs\":%.3f}\n",
              version, what, splits, p.rows, p.cols, p.tokens, same ? "true" : "false", scale > 0 ? diff / scale : diff,
              1e6 * t, weight_bytes / t / 1e12, weight_bytes / t / bw, 2.0 * p.rows * p.cols * p.tokens / t / 1e12);
  std::fflush(stdout);
}

void Versions(const Product& p, double bw) {
  const CudaTuning tuning;
  const LaunchContext ctx{&tuning, nullptr};
  const LinearArgs& a = p.args;
  Run(p, 1, "production", FastLinearSplits(p.rows, p.cols_padded), [&] { return LaunchFastLinear(a, ctx, nullptr); },
      nullptr, bw);
  const std::vector<float> version1 = Output(p);
  // The production rule's block shape for another cut of K.
  auto with_splits = [&](int32_t splits) {
    return [&, splits] {
      const FastLinearShape c =
          ChooseFastLinearShapeFor(p.rows, p.tokens, splits, MultiprocessorCount(),
                                   FastMergesSlices(p.cols_padded, splits, kFastMergeMaxSlices));
      return p.tokens <= 64 ? LaunchFastShape(c.row_tiles, c.token_groups, a, splits, ctx, nullptr)
                            : LaunchFastRows<4>(a, splits, ctx, nullptr);
    };
  };
  const int32_t target32 = FastLinearSplitsFor(p.rows, p.cols_padded, 32);
  const int32_t target128 = FastLinearSplitsFor(p.rows, p.cols_padded, 128);
  Run(p, 2, "split_target_32", target32, with_splits(target32), &version1, bw);
  Run(p, 3, "split_target_128", target128, with_splits(target128), &version1, bw);
  Run(p, 4, "one_slice", 1, with_splits(1), &version1, bw);
  Product aliased = p;
  aliased.args.w.fast_tiles = lab::AliasedCopy(p.args.w.fast_tiles, 2 * FastTileRowsPadded(p.rows) * p.cols_padded);
  Run(aliased, 5, "weights_from_l2", FastLinearSplits(p.rows, p.cols_padded),
      [&] { return LaunchFastLinear(aliased.args, ctx, nullptr); }, &version1, bw);
}

}  // namespace

int main(int argc, char** argv) {
  double bw = 0;
  if (!lab::Start(&bw)) return 1;
  for (const auto& [rows, cols, tokens] : lab::ProductShapes(argc, argv)) Versions(Make(rows, cols, tokens), bw);
  return 0;
}
