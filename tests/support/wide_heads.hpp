// Attention with wide heads and K and V of their own widths (DeepSeek's absorbed MLA: K 576
// and V 512; Gemma 4's 512): a float64 reference written out, and runs on every kernel
// family, at the limits a test picks, over plain tensors and caches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/api.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/fused_match.hpp"

namespace vkattn::test {

struct Widths {
  std::size_t heads, kv, dk, dv;
};

inline std::vector<float> normal_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Causal attention of q [T, H, dk] at |q_pos| over keys [N, Hkv, dk] at 0..N-1 and values
// [N, Hkv, dv], in float64: out [T, H, dv].
inline std::vector<float> wide_reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                         std::size_t n_tokens, const Widths& w, std::size_t n_keys,
                                         const std::vector<std::int32_t>& q_pos) {
  std::vector<float> out(n_tokens * w.heads * w.dv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(w.dk));
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < w.heads; ++h) {
      const std::size_t kh = h / (w.heads / w.kv);
      const std::size_t seen = std::min<std::size_t>(n_keys, static_cast<std::size_t>(q_pos[t]) + 1);
      std::vector<double> s(seen);
      double m = -INFINITY, den = 0;
      for (std::size_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (std::size_t d = 0; d < w.dk; ++d) dot += double{q[(t * w.heads + h) * w.dk + d]} * k[(j * w.kv + kh) * w.dk + d];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (double& x : s) den += (x = std::exp(x - m));
      for (std::size_t d = 0; d < w.dv; ++d) {
        double acc = 0;
        for (std::size_t j = 0; j < seen; ++j) acc += s[j] * v[(j * w.kv + kh) * w.dv + d];
        out[(t * w.heads + h) * w.dv + d] = static_cast<float>(acc / den);
      }
    }
  }
  return out;
}

// Causal attention over plain q (f32), k and v (|kv_dtype|) on |b| with |path|.
inline std::vector<float> run_wide_plain(Backend& b, AttentionPath path, const Widths& w, DType kv_dtype,
                                         const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                         const std::vector<std::int32_t>& q_pos) {
  const std::size_t n_tokens = q_pos.size(), n_keys = k.size() / (w.kv * w.dk);
  Tensor tq = b.tensor({n_tokens, w.heads, w.dk}, DType::f32), tk = b.tensor({n_keys, w.kv, w.dk}, kv_dtype);
  Tensor tv = b.tensor({n_keys, w.kv, w.dv}, kv_dtype), out = b.tensor({n_tokens, w.heads, w.dv}, DType::f32);
  b.upload(tq, q);
  b.upload(tk, k);
  b.upload(tv, v);
  CommandList cmd = b.commands();
  cmd.attention(tq, tk, tv, out, {.q_positions = q_pos}, {.causal = true, .path = path});
  cmd.submit_and_wait();
  return b.download(out);
}

// kKernelFamilies (where "decode" takes attn_decode_group for heads over 256 in groups of
// 16 rows or more), and the two decode kernels forced: attn_decode_group on every shape,
// attn_decode (one row per tile at the widest heads).
inline std::vector<KernelFamily> wide_families() {
  std::vector<KernelFamily> all(std::begin(kKernelFamilies), std::end(kKernelFamilies));
  all.push_back({"decode, group", KernelShape::gpu, AttentionPath::fused, "kernel=group"});
  all.push_back({"decode, one row per tile", KernelShape::gpu, AttentionPath::fused, "kernel=decode"});
  return all;
}

// A Vulkan backend forcing |f|, planned for |limits| with very many compute units (so
// the GPU shapes split keys as far as they can); null and |why| without Vulkan (for
// VKATTN_REQUIRE_BACKEND).
inline std::shared_ptr<Backend> wide_family_backend(const KernelFamily& f, const DeviceLimits& limits, std::string& why) {
  DeviceOptions options = shape_options(f.shape);
  options.cap_limits = limits;
  options.cap_limits->compute_units = 1u << 20;
  ScopedEnv decode("VKATTN_DECODE", f.env);
  ScopedEnv prefill("VKATTN_PREFILL", f.prefill);
  return try_backend(BackendKind::vulkan, options, why);
}

// Limits a test plans its Vulkan backends with, and the families it takes: all; those that
// leave the decode kernel to choose (without subgroups both forced ones run attn_decode's
// shared-memory variant, as "decode" does); those that take attn_decode_group (the GPU
// shape, left to choose or forced).
struct NamedLimits {
  const char* name;
  DeviceLimits limits;
  enum class Families { all, unforced, group } families = Families::all;
};
inline bool skips(const NamedLimits& l, const KernelFamily& f) {
  const std::string env = f.env;
  const bool tiled = *f.prefill != '\0';  // forced, it refuses tiles that do not fit
  const bool forced = env.find("kernel=group") != std::string::npos || env.find("kernel=decode") != std::string::npos || tiled;
  switch (l.families) {
    case NamedLimits::Families::all: return false;
    case NamedLimits::Families::unforced: return forced;
    case NamedLimits::Families::group:
      return tiled || !(f.shape == KernelShape::gpu && (env.empty() || env.find("kernel=group") != std::string::npos));
  }
  return false;
}

// A backend with its cache and what each decode step returned.
struct CacheSide {
  std::shared_ptr<Backend> b;
  std::string name;
  AttentionPath path;
  KvCache cache{};
  std::vector<std::vector<float>> outs{};
};

// The CPU backend, then a Vulkan backend per family of |families| at each of |limits|,
// each with a cache of |config|; empty, with |why|, without Vulkan.
inline std::vector<CacheSide> cache_sides(const KvCacheConfig& config, const std::vector<KernelFamily>& families,
                                          const std::vector<NamedLimits>& limits, std::string& why) {
  std::vector<CacheSide> sides;
  sides.push_back({make_backend(BackendKind::cpu), "cpu", AttentionPath::automatic});
  for (const NamedLimits& l : limits) {
    for (const KernelFamily& f : families) {
      if (skips(l, f)) continue;
      auto gpu = wide_family_backend(f, l.limits, why);
      if (!gpu) return {};
      sides.push_back({std::move(gpu), std::string(f.name) + ", " + l.name, f.path});
    }
  }
  for (CacheSide& s : sides) s.cache = s.b->kv_cache(config);
  return sides;
}

}  // namespace vkattn::test
