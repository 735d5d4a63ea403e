// samples/attention_map's figures: the PNG canvas round-trips through libpng, the heatmap's
// probabilities (read back from the three-stage path on Vulkan) are proper distributions
// over the visible keys and match the CPU reference, and both figures are valid PNGs of
// the documented size. The RoPE decay curve matches its closed form.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "attention_figures.hpp"
#include "support/backends.hpp"
#include "support/generation.hpp"

namespace vkattn::test {
namespace {

namespace fs = std::filesystem;

fs::path temp_png(const std::string& name) {
  return fs::temp_directory_path() / ("vkattn-test-" + std::to_string(::getpid()) + "-" + name + ".png");
}

TEST(Canvas, PngRoundTripsPixels) {
  figures::Canvas c(37, 21, figures::Rgb{10, 20, 30});
  c.fill(3, 4, 5, 6, figures::Rgb{200, 100, 50});
  c.fill(-10, -10, 12, 12, figures::kBlack);  // clipped, not a crash
  const fs::path p = temp_png("roundtrip");
  c.write_png(p.string());
  const figures::PngImage img = figures::read_png(p.string());
  ASSERT_EQ(img.width, 37);
  ASSERT_EQ(img.height, 21);
  for (int y = 0; y < 21; ++y)
    for (int x = 0; x < 37; ++x) {
      const figures::Rgb want = c.at(x, y);
      const std::size_t i = (static_cast<std::size_t>(y) * 37 + static_cast<std::size_t>(x)) * 3;
      ASSERT_EQ(img.rgb[i], want.r) << x << "," << y;
      ASSERT_EQ(img.rgb[i + 1], want.g) << x << "," << y;
      ASSERT_EQ(img.rgb[i + 2], want.b) << x << "," << y;
    }
  EXPECT_EQ(c.at(4, 5).r, 200);
  EXPECT_EQ(c.at(1, 1).r, 0);
  EXPECT_EQ(c.at(2, 2).r, 10);

  // A truncated file fails to decode instead of yielding a partial image.
  const auto size = fs::file_size(p);
  fs::resize_file(p, size / 2);
  EXPECT_THROW(figures::read_png(p.string()), std::runtime_error);
  fs::remove(p);
  EXPECT_THROW(figures::read_png(p.string()), std::runtime_error);
  EXPECT_THROW(figures::Canvas(0, 5), std::invalid_argument);
}

TEST(Canvas, TextDrawsGlyphsUprightAndVertical) {
  figures::Canvas c(40, 40);
  EXPECT_EQ(c.text(0, 0, "Hi", figures::kBlack), figures::Canvas::text_length("Hi"));
  EXPECT_EQ(figures::Canvas::text_length("Hi", 2), 24);
  // 'H' row 0 is #...#: pixels 0 and 4 set, 1..3 clear.
  EXPECT_EQ(c.at(0, 0).r, 0);
  EXPECT_EQ(c.at(2, 0).r, 255);
  EXPECT_EQ(c.at(4, 0).r, 0);
  EXPECT_EQ(c.at(2, 3).r, 0);  // the crossbar
  // Vertical text from bottom-left (0, 39): 'H' column 0 (all rows set) lies along y = 38.
  figures::Canvas v(40, 40);
  v.text(0, 39, "H", figures::kBlack, 1, true);
  for (int x = 0; x < 7; ++x) EXPECT_EQ(v.at(x, 38).r, 0) << x;
  EXPECT_EQ(v.at(0, 37).r, 255);
}

// The shipped model, its attention read back on each backend.
class AttentionMapTest : public VulkanVsCpuTest {
 protected:
  figures::AttentionMap collect(Backend& backend, int layer) {
    const auto& tok = shipped_tokenizer();
    llama2c::Model model(shipped_checkpoint(), backend);
    return figures::collect_attention(model, tok, tok.encode("And God said, Let there be light.", true, false), layer);
  }
};

TEST_F(AttentionMapTest, RowsAreDistributionsAndMatchCpu) {
  const auto gpu = collect(*gpu_, 1);
  const auto cpu = collect(*cpu_, 1);
  ASSERT_GT(gpu.n_tokens, 5u);
  ASSERT_EQ(gpu.n_heads, 4u);
  ASSERT_EQ(gpu.labels.size(), gpu.n_tokens);
  EXPECT_EQ(gpu.labels[0], "<s>");
  EXPECT_EQ(gpu.labels[1], "And");  // the dummy-prefix space is dropped after BOS
  for (std::size_t h = 0; h < gpu.n_heads; ++h)
    for (std::size_t q = 0; q < gpu.n_tokens; ++q) {
      double sum = 0;
      for (std::size_t k = 0; k < gpu.n_tokens; ++k) {
        const float p = gpu.at(h, q, k);
        if (k > q) {
          EXPECT_EQ(p, 0.0f) << "causal: head " << h << " query " << q << " key " << k;
        }
        EXPECT_GE(p, 0.0f);
        EXPECT_NEAR(p, cpu.at(h, q, k), 1e-5f) << h << " " << q << " " << k;
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "head " << h << " query " << q;
    }
  // Query 0 sees only itself.
  EXPECT_NEAR(gpu.at(0, 0, 0), 1.0f, 1e-6f);
}

TEST_F(AttentionMapTest, FiguresAreValidPngsOfTheDocumentedSize) {
  const auto map = collect(*gpu_, 0);
  const fs::path heat = temp_png("attention"), decay = temp_png("decay");
  figures::draw_attention(map).write_png(heat.string());
  figures::draw_rope_decay(figures::rope_decay(*gpu_, 64, 10000.0, 256, 8, 3)).write_png(decay.string());
  const auto h = figures::read_png(heat.string());
  EXPECT_EQ(h.width, figures::heatmap_width(map.n_tokens, map.n_heads));
  EXPECT_EQ(h.height, figures::heatmap_height(map.n_tokens));
  // Panels of n cells of kCell pixels, one per head, side by side.
  EXPECT_GT(h.width, static_cast<int>(map.n_heads * map.n_tokens) * figures::kCell);
  const auto d = figures::read_png(decay.string());
  EXPECT_EQ(d.width, figures::kDecayWidth);
  EXPECT_EQ(d.height, figures::kDecayHeight);
  fs::remove(heat);
  fs::remove(decay);
}

TEST_F(AttentionMapTest, RopeDecayMatchesClosedForm) {
  // For q = (pairs z_i), <R(d) q, q> = sum_i |z_i|^2 cos(d theta_i): at d = 0 it is |q|^2,
  // and its mean over q ~ N(0, I) is 2 sum_i cos(d theta_i), which decays with d.
  const std::size_t hd = 64;
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    const auto r = figures::rope_decay(*b, hd, 10000.0, 512, 256, 9);
    ASSERT_EQ(r.mean_dot.size(), 512u);
    EXPECT_NEAR(r.mean_dot[0] / r.mean_norm2, 1.0, 1e-6);
    EXPECT_NEAR(r.mean_norm2 / hd, 1.0, 0.05);
    for (std::size_t d : {1u, 10u, 100u, 511u}) {
      double expect = 0;
      for (std::size_t i = 0; i < hd / 2; ++i) expect += 2 * std::cos(static_cast<double>(d) * std::pow(10000.0, -2.0 * i / hd));
      EXPECT_NEAR(r.mean_dot[d] / r.mean_norm2, expect / hd, 0.05) << "distance " << d;
    }
    EXPECT_LT(std::fabs(r.mean_dot[500] / r.mean_norm2), 0.3);
  }
  EXPECT_THROW(figures::rope_decay(*cpu_, hd, 10000.0, 0, 4, 1), std::invalid_argument);
}

}  // namespace
}  // namespace vkattn::test
