// A small RGB canvas for the sample figures: rectangles, lines, 5x7 text, PNG output through
// libpng's simplified API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace figures {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kGrey{150, 150, 150};

// Perceptually uniform dark-blue -> green -> yellow ramp (viridis' anchors), t in [0, 1].
Rgb viridis(double t);

class Canvas {
 public:
  // Throws std::invalid_argument unless 1 <= width, height <= 16384.
  Canvas(int width, int height, Rgb background = kWhite);
  int width() const { return width_; }
  int height() const { return height_; }
  Rgb at(int x, int y) const;

  // Every drawing call clips to the canvas.
  void fill(int x, int y, int w, int h, Rgb c);
  void line(double x0, double y0, double x1, double y1, Rgb c);
  // Printable ASCII at (x, y) = top-left, each glyph cell 6x8 pixels times |scale|; other
  // bytes draw as '?'. vertical: rotated a quarter turn, reading upwards from (x, y) =
  // bottom-left. Returns the length along the text direction in pixels.
  int text(int x, int y, std::string_view s, Rgb c, int scale = 1, bool vertical = false);
  static int text_length(std::string_view s, int scale = 1);

  // Throws std::runtime_error naming the file when libpng cannot write it.
  void write_png(const std::string& path) const;

 private:
  void put(int x, int y, Rgb c);
  int width_, height_;
  std::vector<std::uint8_t> rgb_;
};

struct PngImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // decoded, 3 bytes per pixel
};
// Decodes a whole PNG (so a truncated or corrupt file fails); throws std::runtime_error.
PngImage read_png(const std::string& path);

}  // namespace figures
