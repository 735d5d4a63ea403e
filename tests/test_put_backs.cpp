// The spans of a KV cache's sequence in which lists destroyed unrun made the changes they
// put back (KvCacheImpl::PutBacks): attention rotating keys on read and planned in one is
// refused, planned between two is not.
#include <gtest/gtest.h>

#include "common/kv_cache_impl.hpp"

namespace vkattn::detail {
namespace {

using PutBacks = KvCacheImpl::PutBacks;

TEST(PutBacks, DisjointSpansStayApart) {
  PutBacks p;
  p.add(10, 20, 0);
  p.add(30, 40, 0);
  EXPECT_FALSE(p.covers(10)) << "planned before the first op";
  EXPECT_TRUE(p.covers(11));
  EXPECT_TRUE(p.covers(20));
  EXPECT_FALSE(p.covers(25)) << "between the drops";
  EXPECT_FALSE(p.covers(30));
  EXPECT_TRUE(p.covers(40));
  EXPECT_FALSE(p.covers(41));
  EXPECT_EQ(p.n, 2u);
}

TEST(PutBacks, OverlappingAndTouchingSpansJoin) {
  PutBacks p;
  p.add(30, 40, 0);
  p.add(10, 20, 0);
  p.add(15, 30, 0);  // overlaps the first, touches the second
  EXPECT_EQ(p.n, 1u);
  EXPECT_TRUE(p.covers(11) && p.covers(25) && p.covers(40));
  EXPECT_FALSE(p.covers(10) || p.covers(41));
}

TEST(PutBacks, SpansBeforeTheSequenceRanAreDropped) {
  PutBacks p;
  p.add(10, 20, 0);
  p.add(30, 40, 25);  // a list ran at 25: attention planned before is refused for that
  EXPECT_EQ(p.n, 1u);
  EXPECT_FALSE(p.covers(15));
  EXPECT_TRUE(p.covers(35));
}

TEST(PutBacks, PastItsRoomTheNearestTwoJoin) {
  PutBacks p;
  for (const auto& [from, to] : {std::pair{100, 110}, {0, 10}, {20, 30}, {200, 210}, {32, 40}}) p.add(from, to, 0);
  EXPECT_EQ(p.n, PutBacks::kSpans);
  EXPECT_TRUE(p.covers(31)) << "(20, 30] and (32, 40] joined";
  EXPECT_FALSE(p.covers(15) || p.covers(50) || p.covers(150));
  EXPECT_TRUE(p.covers(5) && p.covers(105) && p.covers(205));
  for (std::size_t i = 1; i < p.n; ++i) EXPECT_LT(p.spans[i - 1].to, p.spans[i].from) << "kept in order";
}

}  // namespace
}  // namespace vkattn::detail
