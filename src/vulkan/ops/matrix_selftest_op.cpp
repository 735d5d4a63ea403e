// The matrix path's device self-test: mt_selftest.comp in the form the backend would
// dispatch, on a fixed input whose every product and sum is exact, checked bit for bit
// against the same arithmetic on the host. Drivers list VK_KHR_cooperative_matrix on
// hardware that miscompiles it (llama.cpp turned it off on Turing), and the layer's
// pitch-0 and uint-array loads are rare in the wild: a backend runs the test once, when it
// is made, before the units take any attention, and runs what a device without units would
// if it fails.
#include <bit>
#include <string>
#include <vector>

#include "common/half.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

namespace {

// mt_selftest.comp's layout (its header): A rows at 0 (pitch 12), K rows at 192 (pitch 8),
// V rows at 320 (pitch 20), the pitch-0 row at 640, the row factors at 652.
constexpr std::uint32_t kA = 0, kAPitch = 12, kBt = 192, kBtPitch = 8, kB = 320, kBPitch = 20, kB0 = 640, kFactors = 652;

// Half |k| of row |r| of the rows of |pitch| uints at |at|.
float half_at(std::span<const std::uint32_t> w, std::uint32_t at, std::uint32_t pitch, std::uint32_t r, std::uint32_t k) {
  return half_to_float(static_cast<std::uint16_t>(w[at + r * pitch + k / 2] >> (16 * (k % 2))));
}

std::string tile_element(std::size_t i) {
  return "tile " + std::to_string(i / 256) + " (" + std::to_string(i % 256 / 16) + ", " + std::to_string(i % 16) + ")";
}

// ", 8x8x8 matrices" for the units' form: which cooperative matrices made the tiles.
std::string matrix_side(const PhysicalDevice& physical, bool units) {
  if (!units) return "";
  const std::string side = std::to_string(physical.matrix_tile);
  return ", " + side + "x" + side + "x" + side + " matrices";
}

}  // namespace

std::vector<std::uint32_t> matrix_selftest_input() {
  std::vector<std::uint32_t> w(kMatrixSelftestWords);
  // Integers in [-4, 4] from a fixed LCG: any sum of 32 of their products is exact in f16
  // products and f32 sums, whatever the order (but the probe below).
  std::uint32_t state = 0x2545F491u;
  const auto small = [&] {
    state = state * 1664525u + 1013904223u;
    return detail::float_to_half(static_cast<float>(static_cast<int>((state >> 16) % 9u) - 4));
  };
  for (std::uint32_t i = 0; i < kFactors; ++i) {
    const std::uint32_t lo = small();
    w[i] = lo | (std::uint32_t{small()} << 16);
  }
  // One precision probe: A's row 0 and K's row 0 hold 1 + 2^-10, so tile 0's (0, 0) is
  // 16 (1 + 2^-9 + 2^-20) = 16 + 2^-5 + 2^-16, exact in f32 sums in any order (every
  // partial sum is a multiple of 2^-20 below 16, or 2^-16 above), where sums kept in f16
  // or products rounded to f16 lose the low bits. The rest of row 0 and column 0 stay
  // multiples of 2^-10 (or 2^-16 for (0, 0) in tiles 1 and 2), exact as well.
  const std::uint32_t probe = detail::float_to_half(1.0f + 0x1p-10f);
  for (std::uint32_t k = 0; k < 16; k += 2) {
    w[kA + k / 2] = probe | (probe << 16);
    w[kBt + k / 2] = probe | (probe << 16);
  }
  // Powers of two of both signs: the scaled tile stays exact.
  const float factors[] = {0.5f, 2.0f, -1.0f, 4.0f, 0.25f, 1.0f, -2.0f, 8.0f};
  for (std::uint32_t r = 0; r < 16; ++r) w[kFactors + r] = std::bit_cast<std::uint32_t>(factors[r % 8] * (r < 8 ? 1.0f : -1.0f));
  return w;
}

std::vector<std::uint32_t> matrix_selftest_expected(std::span<const std::uint32_t> w) {
  std::vector<std::uint32_t> want(4 * 256);
  for (std::uint32_t r = 0; r < 16; ++r) {
    for (std::uint32_t n = 0; n < 16; ++n) {
      float c0 = 0, c1 = 0, d = 0;
      for (std::uint32_t k = 0; k < 16; ++k) {
        const float a = half_at(w, kA, kAPitch, r, k);
        c0 += a * half_at(w, kBt, kBtPitch, n, k);  // B^T: key row n, element k
        c1 += a * half_at(w, kB, kBPitch, k, n);    // B: value row k, element n
        d += a * half_at(w, kB0, 0, k, n);          // B0: the one row, element n
      }
      want[r * 16 + n] = std::bit_cast<std::uint32_t>(c0);
      want[256 + r * 16 + n] = std::bit_cast<std::uint32_t>(c0 + c1);
      want[512 + r * 16 + n] = std::bit_cast<std::uint32_t>((c0 + c1) * std::bit_cast<float>(w[kFactors + r]));
      want[768 + r * 16 + n] = std::bit_cast<std::uint32_t>(d);
    }
  }
  return want;
}

std::string run_matrix_selftest(const std::shared_ptr<Context>& ctx, bool units, std::uint32_t sg, const SelftestTamper& tamper) {
  const std::vector<std::uint32_t> words = matrix_selftest_input();
  std::vector<std::uint32_t> want = matrix_selftest_expected(words);
  std::vector<std::uint32_t> got;
  try {
    if (tamper) tamper(want);
    got = matrix_selftest(ctx, words, sg, units);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::device_lost || e.code() == ErrorCode::out_of_memory) throw;  // the backend's, not the path's
    return std::string("mt_selftest did not run: ") + e.what();
  }
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (!wrong++) first = i;
  }
  if (!wrong) return "";
  return "mt_selftest gave " + std::to_string(wrong) + " of " + std::to_string(want.size()) + " values wrong; first " +
         tile_element(first) + ": " + std::to_string(std::bit_cast<float>(got[first])) + ", expected " +
         std::to_string(std::bit_cast<float>(want[first]));
}

void matrix_path_failed(Context& ctx, const std::string& failure) {
  ctx.limits.matrix_units = ctx.limits.matrix_standin = false;
  ctx.physical.info.limits.matrix_units = ctx.physical.info.limits.matrix_standin = false;
  ctx.physical.info.matrix_note = "the matrix units failed vkattn's self-test (" + failure +
                                  "); the kernels of a device without them run instead (matrix_units = off)";
  ctx.log->log(LogLevel::warning, "device " + ctx.physical.info.name + ": " + ctx.physical.info.matrix_note);
}

bool check_matrix_path(const std::shared_ptr<Context>& ctx, bool units, std::uint32_t sg, const SelftestTamper& tamper) {
  const std::string failure = run_matrix_selftest(ctx, units, sg, tamper);
  if (!failure.empty()) {
    matrix_path_failed(*ctx, failure);
    return false;
  }
  ctx->log->log(LogLevel::info, "device " + ctx->physical.info.name + ": the matrix " +
                                    (units ? "units pass" : "stand-in passes") + " the self-test (subgroups of " +
                                    std::to_string(sg) + matrix_side(ctx->physical, units) + ")");
  return true;
}

void check_matrix_units(const std::shared_ptr<Context>& ctx) {
  if (ctx->limits.matrix_units) check_matrix_path(ctx, true, matrix_subgroup_size(ctx->limits));
}

}  // namespace vkattn::detail
