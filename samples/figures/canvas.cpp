#include "canvas.hpp"

#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "font5x7.hpp"

namespace figures {

Rgb viridis(double t) {
  static constexpr std::array<Rgb, 5> anchors = {{{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * (anchors.size() - 1);
  const std::size_t i = std::min<std::size_t>(static_cast<std::size_t>(t), anchors.size() - 2);
  const double f = t - static_cast<double>(i);
  auto mix = [f](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>(std::lround(a + (b - a) * f)); };
  return {mix(anchors[i].r, anchors[i + 1].r), mix(anchors[i].g, anchors[i + 1].g), mix(anchors[i].b, anchors[i + 1].b)};
}

Canvas::Canvas(int width, int height, Rgb background) : width_(width), height_(height) {
  if (width < 1 || width > 16384 || height < 1 || height > 16384)
    throw std::invalid_argument("Canvas: size " + std::to_string(width) + "x" + std::to_string(height) +
                                "; valid: 1..16384 on each side");
  rgb_.resize(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  fill(0, 0, width, height, background);
}

Rgb Canvas::at(int x, int y) const {
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  return {rgb_.at(i), rgb_.at(i + 1), rgb_.at(i + 2)};
}

void Canvas::put(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)) * 3;
  rgb_[i] = c.r;
  rgb_[i + 1] = c.g;
  rgb_[i + 2] = c.b;
}

void Canvas::fill(int x, int y, int w, int h, Rgb c) {
  for (int yy = std::max(y, 0); yy < std::min(y + h, height_); ++yy)
    for (int xx = std::max(x, 0); xx < std::min(x + w, width_); ++xx) put(xx, yy, c);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return;
  const double steps = std::ceil(std::max({std::fabs(x1 - x0), std::fabs(y1 - y0), 1.0}));
  if (steps > 1e5) return;  // far off-canvas; nothing sensible to draw
  for (double i = 0; i <= steps; ++i)
    put(static_cast<int>(std::lround(x0 + (x1 - x0) * i / steps)), static_cast<int>(std::lround(y0 + (y1 - y0) * i / steps)), c);
}

int Canvas::text_length(std::string_view s, int scale) { return static_cast<int>(s.size()) * (kGlyphWidth + 1) * scale; }

int Canvas::text(int x, int y, std::string_view s, Rgb c, int scale, bool vertical) {
  int advance = 0;
  for (char ch : s) {
    const auto code = static_cast<unsigned char>(ch);
    const auto& glyph = kFont5x7[(code >= 0x20 && code <= 0x7E ? code : '?') - 0x20];
    for (int row = 0; row < kGlyphHeight; ++row)
      for (int col = 0; col < kGlyphWidth; ++col) {
        if (!((glyph[static_cast<std::size_t>(row)] >> (kGlyphWidth - 1 - col)) & 1)) continue;
        // Upright: (col, row) from the top-left. Vertical: the glyph's top faces left and the
        // text advances upwards from the bottom-left corner.
        const int px = vertical ? x + row * scale : x + advance + col * scale;
        const int py = vertical ? y - advance - (col + 1) * scale : y + row * scale;
        fill(px, py, scale, scale, c);
      }
    advance += (kGlyphWidth + 1) * scale;
  }
  return advance;
}

void Canvas::write_png(const std::string& path) const {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width_);
  image.height = static_cast<png_uint_32>(height_);
  image.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, rgb_.data(), 0, nullptr))
    throw std::runtime_error("cannot write PNG " + path + ": " + image.message);
}

PngImage read_png(const std::string& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str()))
    throw std::runtime_error("cannot read PNG " + path + ": " + image.message);
  image.format = PNG_FORMAT_RGB;
  PngImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    const std::string why = image.message;
    png_image_free(&image);
    throw std::runtime_error("cannot decode PNG " + path + ": " + why);
  }
  return out;
}

}  // namespace figures
