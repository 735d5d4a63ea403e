#include "attention_figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>

namespace figures {
namespace {

constexpr int kGlyph = 6;  // glyph advance at scale 1
constexpr int kMargin = 10;
constexpr int kGap = 16;
constexpr int kTitle = 20;
constexpr int kCaption = 16;
constexpr int kLegend = 34;
constexpr int kLabelSpace = kLabelChars * kGlyph + 6;

std::string label(const llama2c::Tokenizer& tok, int prev, int token) {
  if (token == llama2c::kBos) return "<s>";
  std::string out;
  for (char c : tok.decode_piece(prev, token)) {
    if (c == ' ')
      out += '_';
    else if (c == '\n')
      out += "\\n";
    else
      out += (c >= 0x20 && c <= 0x7E) ? c : '?';
  }
  return out.size() > kLabelChars ? out.substr(0, kLabelChars) : out;
}

}  // namespace

AttentionMap collect_attention(llama2c::Model& model, const llama2c::Tokenizer& tokenizer, const std::vector<int>& tokens,
                               int layer) {
  if (tokens.empty() || tokens.size() > model.capacity())
    throw std::invalid_argument("collect_attention: tokens = " + std::to_string(tokens.size()) + "; valid: [1, " +
                                std::to_string(model.capacity()) + "] (the cache capacity)");
  model.keep_probabilities(layer);
  AttentionMap map;
  map.layer = layer;
  map.n_tokens = tokens.size();
  const std::size_t n = tokens.size(), cap = model.capacity();
  for (std::size_t t = 0; t < n; ++t) {
    model.forward(tokens[t], static_cast<std::int32_t>(t));
    const std::vector<float>& probs = model.probabilities();  // [heads, capacity]
    if (t == 0) {
      map.n_heads = probs.size() / cap;
      map.p.assign(map.n_heads * n * n, 0.0f);
    }
    for (std::size_t h = 0; h < map.n_heads; ++h)
      std::copy_n(probs.begin() + static_cast<std::ptrdiff_t>(h * cap), n,
                  map.p.begin() + static_cast<std::ptrdiff_t>((h * n + t) * n));
    map.labels.push_back(label(tokenizer, t ? tokens[t - 1] : -1, tokens[t]));
  }
  model.keep_probabilities(-1);
  return map;
}

int heatmap_width(std::size_t n_tokens, std::size_t n_heads) {
  const int panels = static_cast<int>(n_heads) * static_cast<int>(n_tokens) * kCell + (static_cast<int>(n_heads) - 1) * kGap;
  return kMargin + kLabelSpace + panels + kMargin;
}

int heatmap_height(std::size_t n_tokens) {
  return kMargin + kTitle + kLabelSpace + static_cast<int>(n_tokens) * kCell + kCaption + kLegend;
}

Canvas draw_attention(const AttentionMap& map) {
  const std::size_t n = map.n_tokens;
  Canvas c(heatmap_width(n, map.n_heads), heatmap_height(n));
  c.text(kMargin, kMargin, "layer " + std::to_string(map.layer) + " attention: row = query, column = key", kBlack, 2);
  const int top = kMargin + kTitle + kLabelSpace;
  const int left0 = kMargin + kLabelSpace;
  for (std::size_t q = 0; q < n; ++q) {  // query labels, right-aligned against the first panel
    const std::string& s = map.labels[q];
    c.text(left0 - 4 - Canvas::text_length(s), top + static_cast<int>(q) * kCell + 2, s, kBlack);
  }
  for (std::size_t h = 0; h < map.n_heads; ++h) {
    const int left = left0 + static_cast<int>(h) * (static_cast<int>(n) * kCell + kGap);
    for (std::size_t k = 0; k < n; ++k)  // key labels, reading upwards above each column
      c.text(left + static_cast<int>(k) * kCell + 2, top - 4, map.labels[k], kBlack, 1, true);
    for (std::size_t q = 0; q < n; ++q)
      for (std::size_t k = 0; k < n; ++k)
        c.fill(left + static_cast<int>(k) * kCell, top + static_cast<int>(q) * kCell, kCell - 1, kCell - 1,
               k > q ? Rgb{235, 235, 235} : viridis(std::sqrt(std::max(0.0f, map.at(h, q, k)))));
    c.text(left, top + static_cast<int>(n) * kCell + 4, "head " + std::to_string(h), kBlack);
  }
  const int ly = top + static_cast<int>(n) * kCell + kCaption + 8;
  const int lx = c.text(kMargin, ly, "p = 0 ", kBlack) + kMargin;
  for (int i = 0; i < 200; ++i) c.fill(lx + i, ly - 1, 1, 9, viridis(i / 199.0));
  c.text(lx + 206, ly, "1   (colour: sqrt p; grey: masked)", kBlack);
  return c;
}

RopeDecay rope_decay(vkattn::Backend& backend, std::size_t head_dim, double base, std::size_t n_distances, std::size_t samples,
                     std::uint32_t seed) {
  if (n_distances == 0 || samples == 0) throw std::invalid_argument("rope_decay: n_distances and samples must be >= 1");
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> q(samples * head_dim);
  for (float& v : q) v = normal(rng);
  // x[m, s] = q_s for every position m; one rope op rotates row m by position m.
  std::vector<float> x(n_distances * q.size());
  for (std::size_t m = 0; m < n_distances; ++m)
    std::copy(q.begin(), q.end(), x.begin() + static_cast<std::ptrdiff_t>(m * q.size()));
  std::vector<std::int32_t> positions(n_distances);
  for (std::size_t m = 0; m < n_distances; ++m) positions[m] = static_cast<std::int32_t>(m);
  vkattn::Tensor t = backend.tensor({n_distances, samples, head_dim}, vkattn::DType::f32);
  backend.upload(t, x);
  vkattn::CommandList cmd = backend.commands();
  cmd.rope(t, positions, {.layout = vkattn::RopeLayout::interleaved, .base = base});
  cmd.submit_and_wait();
  const std::vector<float> r = backend.download(t);

  RopeDecay d{.head_dim = head_dim, .base = base, .mean_norm2 = 0, .mean_dot = std::vector<double>(n_distances, 0.0)};
  for (float v : q) d.mean_norm2 += static_cast<double>(v) * v;
  d.mean_norm2 /= static_cast<double>(samples);
  for (std::size_t m = 0; m < n_distances; ++m) {
    double sum = 0;
    for (std::size_t i = 0; i < q.size(); ++i) sum += static_cast<double>(r[m * q.size() + i]) * q[i];
    d.mean_dot[m] = sum / static_cast<double>(samples);
  }
  return d;
}

Canvas draw_rope_decay(const RopeDecay& decay) {
  Canvas c(kDecayWidth, kDecayHeight);
  char title[160];
  std::snprintf(title, sizeof title, "RoPE long-term decay: mean <rope(q,m), rope(q,n)> / |q|^2, head_dim %zu, base %g",
                decay.head_dim, decay.base);
  c.text(kMargin, kMargin, title, kBlack);
  const int x0 = 60, x1 = kDecayWidth - 20, y0 = kDecayHeight - 40, y1 = 40;  // plot box; y grows down
  const double ymin = -0.25, ymax = 1.0;
  const double xmax = static_cast<double>(std::max<std::size_t>(decay.mean_dot.size(), 2) - 1);
  auto px = [&](double d) { return x0 + (x1 - x0) * d / xmax; };
  auto py = [&](double v) { return y0 - (y0 - y1) * (v - ymin) / (ymax - ymin); };
  for (double v = ymin; v <= ymax + 1e-9; v += 0.25) {
    c.line(x0, py(v), x1, py(v), v == 0.0 ? kGrey : Rgb{225, 225, 225});
    char s[16];
    std::snprintf(s, sizeof s, "%5.2f", v);
    c.text(x0 - 36, static_cast<int>(py(v)) - 3, s, kBlack);
  }
  const double step = xmax > 2000 ? 512 : xmax > 500 ? 128 : xmax > 100 ? 32 : 8;
  for (double d = 0; d <= xmax; d += step) {
    c.line(px(d), y0, px(d), y0 + 4, kBlack);
    const std::string s = std::to_string(static_cast<long>(d));
    c.text(static_cast<int>(px(d)) - Canvas::text_length(s) / 2, y0 + 8, s, kBlack);
  }
  c.line(x0, y0, x1, y0, kBlack);
  c.line(x0, y0, x0, y1, kBlack);
  c.text((x0 + x1) / 2 - 60, y0 + 22, "relative distance m - n", kBlack);
  const double norm = decay.mean_norm2 > 0 ? decay.mean_norm2 : 1.0;
  for (std::size_t d = 1; d < decay.mean_dot.size(); ++d)
    c.line(px(static_cast<double>(d - 1)), py(decay.mean_dot[d - 1] / norm), px(static_cast<double>(d)),
           py(decay.mean_dot[d] / norm), Rgb{33, 100, 180});
  return c;
}

}  // namespace figures
