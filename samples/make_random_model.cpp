// vkattn-llama2c-random DIR [SEED]: writes DIR/model.bin (a tiny random llama2.c
// checkpoint) and DIR/tokenizer.bin (the synthetic vocab), so vkattn-generate can be tried
// without downloading a model. The text it writes is noise; the numbers are what matter.
// Its heads are 8 wide, too narrow for a quantized cache (q8_0 and q4_0 blocks are 32).
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "llama2c.hpp"

int main(int argc, char** argv) {
  const char* usage = "usage: vkattn-llama2c-random DIR [SEED (an integer in [0, 4294967295]; 1)]\n";
  if (argc >= 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::cout << usage;
    return 0;
  }
  if (argc < 2 || argc > 3 || argv[1][0] == '-') {
    if (argc >= 2 && argv[1][0] == '-') std::cerr << "vkattn-llama2c-random: unknown option " << argv[1] << "\n";
    std::cerr << usage;
    return 2;
  }
  std::uint32_t seed = 1;
  if (argc == 3) {
    const std::string s = argv[2];
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || s[0] < '0' || s[0] > '9' || *end != '\0' || errno == ERANGE || v > 4294967295ull) {
      std::cerr << "vkattn-llama2c-random: SEED = " << s << "; valid: an integer in [0, 4294967295]\n" << usage;
      return 2;
    }
    seed = static_cast<std::uint32_t>(v);
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
    llama2c::save_checkpoint((dir / "model.bin").string(), llama2c::random_checkpoint(c, seed));
    tok.save((dir / "tokenizer.bin").string());
    std::cout << "wrote " << (dir / "model.bin").string() << " and " << (dir / "tokenizer.bin").string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "vkattn-llama2c-random: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
