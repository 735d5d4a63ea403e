// Random calls for the fuzz test (fuzz_ops.cpp): valid calls of every op with the
// tolerances their Vulkan and CPU results must agree within, and invalid calls that must
// throw InvalidArgument naming the op. Everything comes from one seeded generator, so an
// iteration is reproduced from its seed alone.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/api.hpp"

namespace vkattn::fuzz {

class Rng {
 public:
  explicit Rng(std::uint32_t seed) : g_(seed) {}
  std::size_t range(std::size_t lo, std::size_t hi) {  // inclusive
    return std::uniform_int_distribution<std::size_t>(lo, hi)(g_);
  }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g_); }
  bool chance(double p) { return uniform(0, 1) < p; }
  template <class T>
  T pick(std::initializer_list<T> options) {
    return options.begin()[range(0, options.size() - 1)];
  }
  std::vector<float> normals(std::size_t n, double scale = 1.0) {
    std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
    std::vector<float> v(n);
    for (float& x : v) x = d(g_);
    return v;
  }
  std::mt19937& engine() { return g_; }

 private:
  std::mt19937 g_;
};

// What one output tensor must satisfy: |vulkan - cpu| <= atol + rtol * |cpu| everywhere,
// and where |rms| > 0 the root mean square of vulkan - cpu at most |rms|.
struct Check {
  std::string name;
  Shape shape;
  double atol = 0, rtol = 0, rms = 0;
};

// The outputs of one call, in the order of its checks.
using Outputs = std::vector<std::vector<float>>;

struct ValidCall {
  std::string op;
  std::string description;  // every parameter, for a failure message
  std::vector<Check> checks;
  // Runs the call on |b|; |cpu| is the CPU backend's outputs when |b| is Vulkan (stages
  // may read them, to be compared on identical inputs), null on the CPU backend.
  std::function<Outputs(Backend& b, const Outputs* cpu)> run;
  // Where set, the checks in place of |checks|, asked after the Vulkan run: bounds that
  // follow the kernel that run took (f16 products: wider where packed f16 chains ran).
  std::function<std::vector<Check>()> checks_after = nullptr;
};

struct InvalidCall {
  std::string op;  // the op the InvalidArgument must name
  std::string description;
  // Makes what it needs on |b| and |other| (a second backend, for foreign tensors), then
  // makes the bad call on a list that already holds one op; returns that list so the
  // caller can check nothing was recorded.
  std::function<void(Backend& b, Backend& other, CommandList& cmd)> run;
};

ValidCall random_valid_call(Rng& rng);
ValidCall cache_call(Rng& rng);  // fuzz_cache.cpp
ValidCall layer_call(Rng& rng);  // fuzz_layer.cpp
InvalidCall random_invalid_call(Rng& rng);

// Shared by both: a random config within the ranges the generators use.
RopeConfig random_rope_config(Rng& rng, std::size_t head_dim, bool for_cache = false);
// Adds a window direction, chunks (up to keys + 2) and a query temperature, each at random.
void random_visibility(Rng& rng, AttentionConfig& c, std::size_t keys);
// Tokens for each sequence's count in |counts|, in a random interleaving, each at its
// sequence's next position (|next| advances): their sequence ids and positions appended.
void interleave_tokens(Rng& rng, std::vector<std::size_t> counts, std::vector<std::int32_t>& next, std::vector<std::int32_t>& seq,
                       std::vector<std::int32_t>& pos);
// A cache of |c|'s slots as a paged pool, in 3 of 10 calls: blocks of a power of two
// dividing the capacity, a pool every sequence can fill.
void random_paging(Rng& rng, KvCacheConfig& c);
// Attention over a cache of |capacity| slots: causal or not, windows, chunks, temperature,
// soft cap, ALiBi, sinks, any path.
AttentionConfig random_cache_attention(Rng& rng, std::size_t heads, std::size_t capacity);
// The largest |scale * temperature * q.k| of queries at |q_pos| over head_dim-wide rows
// whose elements are at most |max_q| and |max_k| (the soft cap's bound where it is set).
double dot_bound(const AttentionConfig& c, std::span<const std::int32_t> q_pos, std::size_t head_dim, double max_q, double max_k);
// The f16 chains an attention op's kernels summed in: support/f16_match.hpp's packed chain
// where the packed f16 kernels (tiled, group) took f16 products, else none.
int f16_chain(const AttentionRun& run);
// The checks of an f16 products call's two outputs of shape |out|, the Vulkan result
// against the CPU's rounded-inputs oracle (|near|, and the RMS within |rms|) and against
// its f32 reference (|far|): support/f16_match.hpp's bounds.
std::vector<Check> f16_checks(double near, double far, double rms, const Shape& out);
std::string describe(const RopeConfig& c);
std::string describe(const AttentionConfig& c);
std::string shape_text(const Shape& s);

}  // namespace vkattn::fuzz
