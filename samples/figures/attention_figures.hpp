// The figures vkattn-attention-map draws: one layer's attention probabilities as read back
// from the three-stage path, and RoPE's long-term decay computed with vkattn's rope op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "canvas.hpp"
#include "llama2c.hpp"

namespace figures {

struct AttentionMap {
  int layer = 0;
  std::size_t n_heads = 0, n_tokens = 0;
  std::vector<std::string> labels;  // one printable label per token
  std::vector<float> p;             // [head, query, key]; keys after the query hold 0
  float at(std::size_t head, std::size_t query, std::size_t key) const { return p[(head * n_tokens + query) * n_tokens + key]; }
};

// Runs |tokens| through |model| from position 0, one at a time, and keeps |layer|'s
// probabilities for each query. Throws std::invalid_argument when there are more tokens than
// cache slots: slot j would no longer hold position j.
AttentionMap collect_attention(llama2c::Model& model, const llama2c::Tokenizer& tokenizer, const std::vector<int>& tokens,
                               int layer);

// Heatmap layout: one panel per head, a cell per (query, key), token labels along both axes.
inline constexpr int kCell = 12;
inline constexpr int kLabelChars = 8;
int heatmap_width(std::size_t n_tokens, std::size_t n_heads);
int heatmap_height(std::size_t n_tokens);
// Colour is viridis(sqrt(p)), so that weak attention stays visible next to strong.
Canvas draw_attention(const AttentionMap& map);

struct RopeDecay {
  std::size_t head_dim = 0;
  double base = 0;
  double mean_norm2 = 0;         // mean |q|^2 over the samples
  std::vector<double> mean_dot;  // [distance]: mean <rope(q, m), rope(q, n)> for m - n = distance
};
// |samples| random q ~ N(0, 1) rotated by vkattn's rope at positions 0..n_distances-1 on
// |backend|; since RoPE is a rotation, <rope(q, m), rope(q, n)> = <rope(q, m - n), q>.
RopeDecay rope_decay(vkattn::Backend& backend, std::size_t head_dim, double base, std::size_t n_distances, std::size_t samples,
                     std::uint32_t seed);

inline constexpr int kDecayWidth = 820;
inline constexpr int kDecayHeight = 420;
// mean_dot / mean_norm2 against distance, as in the RoFormer paper's figure.
Canvas draw_rope_decay(const RopeDecay& decay);

}  // namespace figures
