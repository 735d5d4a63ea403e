// vkattn-generate: runs a llama2.c model one token at a time, attention on vkattn.
//   vkattn-generate                      the shipped model (models/kjv-tiny.bin)
//   vkattn-generate --model stories15M.bin --tokenizer tokenizer.bin --prompt "Once upon"
// --check runs the Vulkan and CPU backends in lockstep (greedy) and reports how far their
// logits drift apart.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "llama2c.hpp"

namespace {

struct Options {
  std::string model, tokenizer, prompt;
  long steps = 256;
  float temperature = 0.8f, top_p = 0.9f;
  std::uint64_t seed = 0;
  bool seed_given = false;
  long capacity = 0;
  vkattn::BackendKind backend = vkattn::BackendKind::vulkan;
  bool check = false;
  std::optional<vkattn::AttentionPath> attention;  // unset: the three ops, recorded separately
  vkattn::DType kv_dtype = vkattn::DType::f32;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void usage() {
  std::cerr << "usage: vkattn-generate [--model FILE (the shipped kjv-tiny)] [--tokenizer FILE (tokenizer.bin beside\n"
               "  --model, else the shipped one)] [--prompt TEXT] [--steps N (256)]\n"
               "  [--temperature T (0.8; 0 = greedy)] [--top-p P (0.9)] [--seed N] [--capacity SLOTS (seq_len)]\n"
               "  [--backend vulkan|cpu] [--attention stages|auto|fused|three_stages (stages)]\n"
               "  [--kv-dtype f32|f16|q8_0|q4_0 (f32)] [--check]\n";
}

double number(const std::string& opt, const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !std::isfinite(v)) throw UsageError(opt + ": not a number: '" + s + "'");
  return v;
}

long long integer(const std::string& opt, const std::string& s, long long lo, long long hi) {
  const double v = number(opt, s);
  if (v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi))
    throw UsageError(opt + " = " + s + "; valid: an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<long long>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") {
      o.check = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    }
    if (i + 1 >= argc) throw UsageError(a + ": missing value (or unknown option)");
    const std::string v = argv[++i];
    if (a == "--model")
      o.model = v;
    else if (a == "--tokenizer")
      o.tokenizer = v;
    else if (a == "--prompt")
      o.prompt = v;
    else if (a == "--steps")
      o.steps = static_cast<long>(integer(a, v, 1, 1 << 24));
    else if (a == "--temperature") {
      o.temperature = static_cast<float>(number(a, v));
      if (o.temperature < 0) throw UsageError("--temperature = " + v + "; valid: >= 0");
    } else if (a == "--top-p") {
      o.top_p = static_cast<float>(number(a, v));
      if (o.top_p < 0 || o.top_p > 1) throw UsageError("--top-p = " + v + "; valid: [0, 1]");
    } else if (a == "--seed") {
      o.seed = static_cast<std::uint64_t>(integer(a, v, 0, 4294967295LL));  // the sampler's mt19937 takes 32 bits
      o.seed_given = true;
    } else if (a == "--capacity")
      o.capacity = static_cast<long>(integer(a, v, 1, 1 << 20));
    else if (a == "--backend") {
      if (v == "vulkan")
        o.backend = vkattn::BackendKind::vulkan;
      else if (v == "cpu")
        o.backend = vkattn::BackendKind::cpu;
      else
        throw UsageError("--backend = " + v + "; valid: vulkan, cpu");
    } else if (a == "--attention") {
      if (v == "stages")
        o.attention.reset();
      else if (v == "auto")
        o.attention = vkattn::AttentionPath::automatic;
      else if (v == "fused")
        o.attention = vkattn::AttentionPath::fused;
      else if (v == "three_stages")
        o.attention = vkattn::AttentionPath::three_stages;
      else
        throw UsageError("--attention = " + v + "; valid: stages, auto, fused, three_stages");
    } else if (a == "--kv-dtype") {
      if (v == "f32")
        o.kv_dtype = vkattn::DType::f32;
      else if (v == "f16")
        o.kv_dtype = vkattn::DType::f16;
      else if (v == "q8_0")
        o.kv_dtype = vkattn::DType::q8_0;
      else if (v == "q4_0")
        o.kv_dtype = vkattn::DType::q4_0;
      else
        throw UsageError("--kv-dtype = " + v + "; valid: f32, f16, q8_0, q4_0");
    } else
      throw UsageError("unknown option " + a);
  }
  if (o.check && o.backend == vkattn::BackendKind::cpu)
    throw UsageError("--check with --backend cpu; valid: --check alone (Vulkan against the CPU reference)");
  return o;
}

// run.c's safe_printf: skip lone control bytes so raw byte tokens cannot garble the terminal.
void print_piece(const std::string& piece) {
  if (piece.size() == 1) {
    const auto c = static_cast<unsigned char>(piece[0]);
    if (c < 0x20 && c != '\n' && c != '\t') return;
  }
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
}

int run(const Options& o) {
  const llama2c::Checkpoint ck = llama2c::load_checkpoint(llama2c::model_path(o.model));
  const llama2c::Config& c = ck.config;
  const llama2c::Tokenizer tok = llama2c::Tokenizer::load(llama2c::tokenizer_path(o.model, o.tokenizer), c.vocab_size);
  const std::size_t capacity = o.capacity ? static_cast<std::size_t>(o.capacity) : static_cast<std::size_t>(c.seq_len);
  const long steps = o.steps;

  // Every position of the prompt (BOS first) must fit in --steps. The merges take time
  // quadratic in the prompt, so first a bound: a token covers at most the longest piece's
  // bytes (the leading space the encoder adds included).
  std::size_t longest = 1;
  for (std::size_t i = 0; i < tok.size(); ++i) longest = std::max(longest, tok.piece(static_cast<int>(i)).size());
  const std::size_t bytes = o.prompt.empty() ? 0 : o.prompt.size() + 1;
  const auto too_long = [&](std::size_t tokens, const char* how) {
    return UsageError("--prompt is " + std::string(how) + std::to_string(tokens) + " tokens, and with BOS needs --steps >= " +
                      std::to_string(tokens + 1) + " (--steps = " + std::to_string(steps) + ")");
  };
  if (const std::size_t least = (bytes + longest - 1) / longest; static_cast<long>(least) + 1 > steps)
    throw too_long(least, "at least ");
  std::vector<int> prompt = tok.encode(o.prompt, true, false);
  if (static_cast<long>(prompt.size()) > steps) throw too_long(prompt.size() - 1, "");

  auto backend = vkattn::make_backend(o.backend);
  std::unique_ptr<vkattn::Backend> cpu;
  std::optional<llama2c::Model> ref;
  llama2c::Model model(ck, *backend, capacity, o.kv_dtype);
  model.use_attention_op(o.attention);
  if (o.check) {
    cpu = vkattn::make_backend(vkattn::BackendKind::cpu);
    ref.emplace(ck, *cpu, capacity, o.kv_dtype);
  }
  const std::uint64_t seed =
      o.seed_given ? o.seed : static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  llama2c::Sampler sampler(o.check ? 0.0f : o.temperature, o.top_p, seed);
  std::cerr << "model: dim " << c.dim << ", " << c.n_layers << " layers, " << c.n_heads << " heads (" << c.n_kv_heads
            << " kv), vocab " << c.vocab_size << ", seq_len " << c.seq_len << "; cache " << capacity << " slots; "
            << backend->device_name() << (o.check ? " vs CPU reference" : "") << "\n";
  // run.c stops at seq_len; the ring cache runs on, each token attending to the last
  // |capacity| ones. That is exact for a model trained with that window (the shipped one)
  // and an approximation for models trained with full attention.
  if (steps > static_cast<long>(capacity))
    std::cerr << "note: after " << capacity << " tokens the cache wraps: attention becomes a sliding window of " << capacity
              << " tokens\n";

  using clock = std::chrono::steady_clock;
  double prompt_s = 0, gen_s = 0, max_diff = 0;
  long generated = 0, disagree_at = -1;
  int token = prompt[0];
  for (long pos = 0; pos < steps; ++pos) {
    const auto t0 = clock::now();
    const std::vector<float>& logits = model.forward(token, static_cast<std::int32_t>(pos));
    int next = pos + 1 < static_cast<long>(prompt.size()) ? prompt[static_cast<std::size_t>(pos + 1)] : sampler.sample(logits);
    (pos + 1 < static_cast<long>(prompt.size()) ? prompt_s : gen_s) += std::chrono::duration<double>(clock::now() - t0).count();
    if (pos + 1 >= static_cast<long>(prompt.size())) ++generated;
    if (ref) {
      const std::vector<float>& want = ref->forward(token, static_cast<std::int32_t>(pos));
      for (std::size_t i = 0; i < want.size(); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(want[i] - logits[i])));
      if (disagree_at < 0 && llama2c::argmax(want) != llama2c::argmax(logits)) disagree_at = pos;
      if ((pos + 1) % 32 == 0) std::cerr << "\n[check] step " << pos + 1 << ": max |logit diff| so far " << max_diff << "\n";
    }
    if (next == llama2c::kBos) break;  // llama2.c: BOS delimits sequences
    print_piece(tok.decode_piece(token, next));
    token = next;
  }
  std::printf("\n");
  std::fflush(stdout);  // before the stderr summary, so the two do not interleave
  const double total = prompt_s + gen_s;
  const std::size_t n_prompt = prompt.size() - 1;  // BOS is not the user's
  if (n_prompt == 0)
    std::fprintf(stderr, "prompt: none; ");
  else
    std::fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; ", n_prompt,
                 prompt_s > 0 ? static_cast<double>(n_prompt) / prompt_s : 0.0);
  std::fprintf(stderr, "generation: %ld tokens, %.1f tok/s; vkattn calls: %.0f%% of forward time\n", generated,
               gen_s > 0 ? static_cast<double>(generated) / gen_s : 0.0,
               total > 0 ? 100.0 * model.vkattn_seconds() / total : 0.0);
  // Per token over all layers: the host's cost of recording (first token) or replaying the
  // steps, and the device's time running them.
  const double per_token = 1e6 / static_cast<double>(std::max<long>(1, static_cast<long>(prompt.size()) - 1 + generated));
  std::fprintf(
      stderr, "attention per token: host %.0f us (record once, then replay), device %s\n", model.record_seconds() * per_token,
      backend->limits().timestamps ? (std::to_string(static_cast<long>(model.device_seconds() * per_token)) + " us").c_str()
                                   : "not measured (no timestamps)");
  if (ref) {
    std::printf("check: max |logit diff| %.3g; greedy tokens %s\n", max_diff,
                disagree_at < 0 ? "agree" : ("disagree from step " + std::to_string(disagree_at)).c_str());
  }
  // The text (and the check's verdict) went nowhere: a failure, not a pass.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) throw std::runtime_error("writing standard output failed");
  return ref && disagree_at >= 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::cerr << "vkattn-generate: " << e.what() << "\n";
    usage();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vkattn-generate: " << e.what() << "\n";
    return 1;
  }
}
