// The matrix kernel's workgroup plan (attention_mt_op.cpp's plan_matrix_tile) at the
// subgroup sizes GPUs run it on (32 on NVIDIA, 32 or 64 on AMD, 8 or 16 on Intel) and at
// their shared memory: lavapipe runs the stand-in on 8 lanes only, so the plans a GPU
// takes are checked here as a pure function of the limits. docs/kernel-shapes.md has the
// table. Its suite's name holds "Coopmat": `ctest -R Coopmat`.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>

#include "vulkan/dispatch.hpp"

namespace vkattn::test {
namespace {

using detail::MatrixTilePlan;

struct Ask {
  std::uint32_t shared, sg, dk_chunks, dv_chunks;
  bool v_from_k;
  std::uint32_t rows;  // query rows of a KV head (tokens x group): 16 for a decode group
  std::uint32_t invocations = 1024;
};

std::optional<MatrixTilePlan> plan(const Ask& a, const detail::PrefillTuning& tune = {}) {
  DeviceLimits l;
  l.max_shared_memory = a.shared;
  l.max_workgroup_invocations = a.invocations;
  return detail::plan_matrix_tile(l, tune, a.sg, a.dk_chunks, a.dv_chunks, a.v_from_k,
                                  [&](std::uint32_t cap) { return std::min(cap, a.rows); });
}

std::string describe(const std::optional<MatrixTilePlan>& p) {
  if (!p) return "none";
  return std::to_string(p->shape.row_groups) + "x" + std::to_string(p->shape.dim_slices) + "x" +
         std::to_string(p->shape.key_chunks) + " rows " + std::to_string(p->rows) + " dv " + std::to_string(p->dv_chunks);
}

constexpr std::uint32_t k16K = 16384, k48K = 49152, kH200 = 232448;

// The plans of the shapes models run (head dims 64, 128, 192, 256; absorbed MLA's 576-wide
// latent rows with V their first 512), prefill (many rows) and a decode group (16 rows),
// written out: a planner change that moves one shows here.
TEST(CoopmatPlan, PlansAtGpuSubgroupSizes) {
  struct Row {
    Ask ask;
    const char* want;
  };
  const Row rows[] = {
      {{k48K, 32, 4, 4, false, 4096}, "4x1x2 rows 64 dv 4"},       // d64 prefill
      {{k48K, 32, 8, 8, false, 4096}, "4x1x1 rows 64 dv 8"},       // d128 prefill: 2 key chunks pass 48 KiB
      {{k48K, 32, 8, 8, false, 16}, "1x1x2 rows 16 dv 8"},         // d128, a decode group of 16
      {{k48K, 32, 8, 8, false, 8}, "1x1x2 rows 8 dv 8"},           // 8 rows: the last repeats to 16
      {{k48K, 32, 12, 12, false, 4096}, "4x1x1 rows 64 dv 12"},    // d192: the row split first
      {{k48K, 32, 12, 12, false, 16}, "1x4x1 rows 16 dv 12"},      // ... but the dim split for one group
      {{k48K, 32, 16, 16, false, 4096}, "2x2x1 rows 32 dv 16"},    // d256: the dim split first
      {{k48K, 32, 36, 32, true, 4096}, "1x4x1 rows 16 dv 32"},     // absorbed MLA: 9 Q and 8 O chunks a slice
      {{k48K, 64, 36, 32, true, 4096}, "1x1x1 rows 16 dv 32"},     // 64 lanes: one key a lane in 1x4x1's pass
      {{k48K, 64, 12, 12, false, 16}, "1x2x1 rows 16 dv 12"},      // the same rule, d192's group
      {{k48K, 16, 36, 32, true, 16}, "1x4x1 rows 16 dv 32"},       // Intel-sized subgroups
      {{kH200, 32, 8, 8, false, 4096}, "4x1x1 rows 64 dv 8"},      // 48 KiB at most unless tuned
      {{k16K, 32, 8, 8, false, 4096}, "1x1x1 rows 16 dv 8"},       // the spec minimum: d128 fits
      {{k16K, 32, 16, 16, false, 4096}, "none"},                   // ... d256 does not
      {{k16K, 32, 36, 32, true, 16}, "none"},                      // ... nor MLA: the f32 kernels
      {{k48K, 64, 8, 8, false, 4096, 128}, "2x1x2 rows 32 dv 8"},  // 128 invocations: two 64-lane subgroups
  };
  for (const Row& r : rows) {
    const Ask& a = r.ask;
    EXPECT_EQ(describe(plan(a)), r.want) << "shared " << a.shared << " sg " << a.sg << " dk " << a.dk_chunks << " dv "
                                         << a.dv_chunks << " rows " << a.rows << " invocations " << a.invocations;
  }
}

// Whatever it picks fits the device and the kernel's rules, at every size and limit.
TEST(CoopmatPlan, EveryPlanFitsItsDeviceAndTheKernel) {
  int planned = 0;
  for (std::uint32_t shared : {k16K, 32768u, k48K, 65536u, kH200}) {
    for (std::uint32_t sg : {8u, 16u, 32u, 64u}) {
      for (std::uint32_t invocations : {128u, 256u, 1024u}) {
        for (std::uint32_t dk : {1u, 2u, 4u, 8u, 12u, 16u, 20u, 36u}) {
          for (bool v_from_k : {false, true}) {
            const std::uint32_t dv = v_from_k ? std::max(1u, dk * 8 / 9) : dk;
            for (std::uint32_t rows : {1u, 16u, 17u, 48u, 4096u}) {
              const Ask a{shared, sg, dk, dv, v_from_k, rows, invocations};
              const auto p = plan(a);
              SCOPED_TRACE("shared " + std::to_string(shared) + " sg " + std::to_string(sg) + " invocations " +
                           std::to_string(invocations) + " dk " + std::to_string(dk) + " rows " + std::to_string(rows) + ": " +
                           describe(p));
              if (!p) continue;
              ++planned;
              const auto& s = p->shape;
              EXPECT_LE(p->shared_bytes, std::min<std::uint64_t>(shared, k48K));
              EXPECT_LE(s.subgroups() * sg, invocations);
              EXPECT_EQ(p->rows, std::min(16 * s.row_groups, rows));
              EXPECT_GT(p->rows, 16 * (s.row_groups - 1));  // no row group of repeated rows
              EXPECT_GE(p->dv_chunks, dv);
              EXPECT_EQ(p->dv_chunks % s.dim_slices, 0u);
              if (s.dim_slices > 1) {
                EXPECT_EQ(dk % s.dim_slices, 0u);
                EXPECT_LE(dk / s.dim_slices, 9u);  // a slice's Q tiles in registers
                EXPECT_LE(p->dv_chunks / s.dim_slices, 8u);
                EXPECT_LE(sg * s.dim_slices, 128 * s.key_chunks);  // two keys a lane in the scalar pass
              }
              // More shared memory never loses the plan.
              if (shared < kH200) {
                Ask more = a;
                more.shared = kH200;
                EXPECT_TRUE(plan(more).has_value());
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(planned, 500);
}

// $VKATTN_PREFILL's matrix knobs (rows, keys, queries in registers) take the device's whole
// shared memory; a shape that does not fit it is passed over, not taken.
TEST(CoopmatPlan, TunedShapesUseTheWholeSharedMemory) {
  detail::PrefillTuning tune;
  tune.matrix_rows = 64;
  tune.matrix_keys = 64;
  const Ask big{kH200, 32, 8, 8, false, 4096};
  const auto p = plan(big, tune);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(describe(p), "4x1x4 rows 64 dv 8");
  EXPECT_GT(p->shared_bytes, std::uint64_t{k48K});
  EXPECT_EQ(describe(plan({k48K, 32, 8, 8, false, 4096}, tune)), "none");
}

// attn_mt2's plan (plan_matrix2_tile): the row split with queries in registers, 64 x 32
// first at 48 KiB for heads to 128, smaller where less fits, none for wider heads (attn_mt
// takes them) or where nothing fits.
TEST(CoopmatPlan, Nv2Plans) {
  const auto plan2 = [](const Ask& a, const detail::PrefillTuning& tune = {}) {
    DeviceLimits l;
    l.max_shared_memory = a.shared;
    l.max_workgroup_invocations = a.invocations;
    return detail::plan_matrix2_tile(l, tune, a.sg, a.dk_chunks, a.dv_chunks, a.v_from_k,
                                     [&](std::uint32_t cap) { return std::min(cap, a.rows); });
  };
  EXPECT_EQ(describe(plan2({k48K, 32, 8, 8, false, 4096})), "4x1x2 rows 64 dv 8");      // d128 prefill
  EXPECT_EQ(describe(plan2({k48K, 32, 4, 4, false, 4096})), "4x1x4 rows 64 dv 4");      // d64: 64 keys fit
  EXPECT_EQ(describe(plan2({k48K, 32, 8, 8, false, 40})), "2x1x4 rows 32 dv 8");        // 40 rows: two row groups
  EXPECT_EQ(describe(plan2({k48K, 32, 8, 8, false, 16})), "1x1x2 rows 16 dv 8");        // a decode group
  EXPECT_EQ(describe(plan2({k16K, 32, 8, 8, false, 4096})), "4x1x1 rows 64 dv 8");      // the spec minimum
  EXPECT_EQ(describe(plan2({k48K, 32, 8, 8, false, 4096, 64})), "2x1x4 rows 32 dv 8");  // 64 invocations
  EXPECT_EQ(describe(plan2({k48K, 32, 12, 12, false, 4096})), "none");                  // d192: attn_mt
  EXPECT_EQ(describe(plan2({k48K, 32, 8, 16, false, 4096})), "none");                   // V 256 wide
  EXPECT_TRUE(plan2({k48K, 32, 8, 8, false, 4096}).value().nv2);
  EXPECT_FALSE(plan({k48K, 32, 8, 8, false, 4096}).value().nv2);
  detail::PrefillTuning tune;
  tune.matrix_rows = 16;
  tune.matrix_keys = 64;
  EXPECT_EQ(describe(plan2({k48K, 32, 8, 8, false, 4096}, tune)), "1x1x4 rows 16 dv 8");
  EXPECT_EQ(describe(plan2({4096, 32, 8, 8, false, 4096})), "none");  // nothing fits 4 KiB
}

}  // namespace
}  // namespace vkattn::test
