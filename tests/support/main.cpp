// The test programs' main: GoogleTest's, but a run whose every test was skipped (no Vulkan
// device, a feature the device lacks) exits 77, CTest's SKIP_RETURN_CODE. A regular
// expression cannot tell that apart in brief output: "[  PASSED  ] 0 tests" is also what a
// batch whose every test failed prints, which CTest then counted as skipped.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (rc == 0 && unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count()) return 77;
  return rc;
}
