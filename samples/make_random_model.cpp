// vkattn-llama2c-random DIR [SEED]: writes DIR/model.bin (a tiny random llama2.c
// checkpoint) and DIR/tokenizer.bin (the synthetic vocab), so vkattn-generate can be tried
// without downloading a model. The text it writes is noise; the numbers are what matter.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "llama2c.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: vkattn-llama2c-random DIR [SEED]\n";
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    const llama2c::Tokenizer tok = llama2c::synthetic_tokenizer();
    llama2c::Config c{.dim = 64,
                      .hidden_dim = 172,
                      .n_layers = 4,
                      .n_heads = 8,
                      .n_kv_heads = 4,
                      .vocab_size = static_cast<std::int32_t>(tok.size()),
                      .seq_len = 256,
                      .shared_classifier = false};
    const auto seed = argc == 3 ? static_cast<std::uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 1u;
    llama2c::save_checkpoint((dir / "model.bin").string(), llama2c::random_checkpoint(c, seed));
    tok.save((dir / "tokenizer.bin").string());
    std::cout << "wrote " << (dir / "model.bin").string() << " and " << (dir / "tokenizer.bin").string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "vkattn-llama2c-random: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
