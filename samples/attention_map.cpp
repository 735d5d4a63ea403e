// vkattn-attention-map: runs a prompt through a llama2.c model (the shipped one by default)
// and draws two PNGs:
//   attention.png   one layer's attention probabilities per head, read back from the
//                   three-stage path (attn_softmax's output), token labels on both axes;
//   rope_decay.png  the mean of <rope(q,m), rope(q,n)> / |q|^2 against m - n, for random q,
//                   rotated by vkattn's rope op (the RoFormer paper's long-term decay).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "attention_figures.hpp"

namespace {

void usage() {
  std::cerr << "usage: vkattn-attention-map [--model FILE] [--tokenizer FILE (tokenizer.bin beside --model)] [--prompt TEXT] "
               "[--layer L (1)]\n"
               "  [--out-dir DIR (.)] [--backend vulkan|cpu]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, tokenizer;
  std::string prompt = "And God said, Let there be light: and there was light.";
  std::string out_dir = ".";
  int layer = 1;
  vkattn::BackendKind kind = vkattn::BackendKind::vulkan;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        usage();
        return 0;
      }
      if (i + 1 >= argc) throw std::invalid_argument(a + ": missing value (or unknown option)");
      const std::string v = argv[++i];
      if (a == "--model")
        model = v;
      else if (a == "--tokenizer")
        tokenizer = v;
      else if (a == "--prompt")
        prompt = v;
      else if (a == "--out-dir")
        out_dir = v;
      else if (a == "--layer") {
        std::size_t used = 0;
        try {
          layer = std::stoi(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size()) throw std::invalid_argument("--layer: not an integer: '" + v + "'");
      } else if (a == "--backend") {
        if (v != "vulkan" && v != "cpu") throw std::invalid_argument("--backend = " + v + "; valid: vulkan, cpu");
        kind = v == "cpu" ? vkattn::BackendKind::cpu : vkattn::BackendKind::vulkan;
      } else
        throw std::invalid_argument("unknown option " + a);
    }
    const llama2c::Checkpoint ck = llama2c::load_checkpoint(llama2c::model_path(model));
    const llama2c::Tokenizer tok = llama2c::Tokenizer::load(llama2c::tokenizer_path(model, tokenizer), ck.config.vocab_size);
    if (layer < 0 || layer >= ck.config.n_layers)
      throw std::invalid_argument("--layer = " + std::to_string(layer) + "; valid: [0, " + std::to_string(ck.config.n_layers) +
                                  ")");
    std::filesystem::create_directories(out_dir);  // before the model runs, so that a bad one fails first
    auto backend = vkattn::make_backend(kind);
    llama2c::Model model(ck, *backend);
    const std::vector<int> tokens = tok.encode(prompt, true, false);
    if (tokens.size() > model.capacity())
      throw std::invalid_argument("--prompt: " + std::to_string(tokens.size()) + " tokens; valid: at most " +
                                  std::to_string(model.capacity()) + " (the model's context)");
    const figures::AttentionMap map = figures::collect_attention(model, tok, tokens, layer);
    figures::draw_attention(map).write_png(out_dir + "/attention.png");
    const figures::RopeDecay decay = figures::rope_decay(*backend, 128, 10000.0, 1024, 64, 1);
    figures::draw_rope_decay(decay).write_png(out_dir + "/rope_decay.png");
    std::cout << "wrote " << out_dir << "/attention.png (layer " << layer << ", " << map.n_tokens << " tokens, " << map.n_heads
              << " heads) and " << out_dir << "/rope_decay.png (head_dim 128, base 10000) on " << backend->device_name() << "\n";
    return 0;
  } catch (const vkattn::InvalidArgument& e) {  // the library's, not the command line's
    std::cerr << "vkattn-attention-map: " << e.what() << "\n";
    return 1;
  } catch (const std::invalid_argument& e) {
    std::cerr << "vkattn-attention-map: " << e.what() << "\n";
    usage();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vkattn-attention-map: " << e.what() << "\n";
    return 1;
  }
}
