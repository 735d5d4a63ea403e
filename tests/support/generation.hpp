// Shared by the generator tests: the shipped model loaded once per test process, and
// greedy generation on two models (a Vulkan one and a CPU one) in lockstep.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "llama2c.hpp"

namespace vkattn::test {

inline const llama2c::Checkpoint& shipped_checkpoint() {
  static const llama2c::Checkpoint ck = llama2c::load_checkpoint(llama2c::default_model_path());
  return ck;
}

inline const llama2c::Tokenizer& shipped_tokenizer() {
  static const llama2c::Tokenizer tok =
      llama2c::Tokenizer::load(llama2c::default_tokenizer_path(), shipped_checkpoint().config.vocab_size);
  return tok;
}

struct GreedyRun {
  std::vector<int> a, b;     // each model's tokens after every step (prompt tokens included)
  float max_logit_diff = 0;  // over the steps where both models had the same input
};

// Feeds |prompt| (BOS first), then each model's own argmax, for |steps| positions from 0;
// the two models run independently.
inline GreedyRun greedy_both(llama2c::Model& a, llama2c::Model& b, const std::vector<int>& prompt, int steps) {
  GreedyRun run;
  int ta = prompt.at(0), tb = prompt.at(0);
  for (int pos = 0; pos < steps; ++pos) {
    const auto& la = a.forward(ta, pos);
    const auto& lb = b.forward(tb, pos);
    if (ta == tb)
      for (std::size_t i = 0; i < la.size(); ++i) run.max_logit_diff = std::max(run.max_logit_diff, std::fabs(la[i] - lb[i]));
    const auto next = static_cast<std::size_t>(pos + 1);
    ta = next < prompt.size() ? prompt[next] : llama2c::argmax(la);
    tb = next < prompt.size() ? prompt[next] : llama2c::argmax(lb);
    run.a.push_back(ta);
    run.b.push_back(tb);
  }
  return run;
}

}  // namespace vkattn::test
