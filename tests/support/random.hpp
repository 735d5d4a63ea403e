// Seeded inputs: every test draws from a fixed seed so failures reproduce.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace vkattn::test {

inline std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<std::int32_t> uniform_positions(std::size_t n, std::uint32_t seed, std::int32_t lo = 0,
                                                   std::int32_t hi = INT32_MAX) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(lo, hi);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace vkattn::test
