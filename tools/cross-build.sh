#!/usr/bin/env bash
# Cross-builds the library and the C API's test programs, compile and link only (nothing
# runs), for 64-bit Windows with MinGW-w64 or for 64-bit Arm Linux:
#   tools/cross-build.sh windows|aarch64 [shared|static] [BUILD_DIR]
# Needs Debian's g++-mingw-w64-x86-64-posix or g++-aarch64-linux-gnu (tools/install-deps.sh),
# and the Vulkan headers (libvulkan-dev): the loader is found at run time, so no Vulkan
# library of the target is needed. Checks that the shared library does not import one.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?windows or aarch64}
kind=${2:-shared}
dir=${3:-build-$target-$kind}
case "$target" in
  windows) toolchain=cmake/toolchains/mingw-w64-x86_64.cmake ;;
  aarch64) toolchain=cmake/toolchains/aarch64-linux-gnu.cmake ;;
  *) echo "usage: $0 windows|aarch64 [shared|static] [BUILD_DIR]" >&2; exit 2 ;;
esac
case "$kind" in
  shared) shared=ON ;;
  static) shared=OFF ;;
  *) echo "usage: $0 windows|aarch64 [shared|static] [BUILD_DIR]" >&2; exit 2 ;;
esac

# The Vulkan headers alone, in a folder of their own: pointing the cross compiler at
# /usr/include would put the host's C library headers before the target's.
headers=$PWD/$dir/vulkan-headers
mkdir -p "$headers"
for h in vulkan vk_video; do
  [ -d "/usr/include/$h" ] && ln -sfn "/usr/include/$h" "$headers/$h"
done

# No optimization, and a unity build (several sources to a file: a quarter less compile
# time): this build proves that everything compiles and links; it runs nowhere.
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DVKATTN_VULKAN_INCLUDE_DIR="$headers" \
  -DCMAKE_BUILD_TYPE= -DCMAKE_UNITY_BUILD=ON -DBUILD_SHARED_LIBS="$shared" -DVKATTN_WERROR=ON -DVKATTN_BUILD_TESTS=OFF \
  -DVKATTN_BUILD_C_API_TESTS=ON -DVKATTN_BUILD_SAMPLES=OFF -DVKATTN_BUILD_BENCH=OFF -DVKATTN_PYTHON=OFF \
  -DVKATTN_INSTALL=OFF > "$dir/configure.log"
cmake --build "$dir" -j"$(nproc)" > "$dir/build.log"

suffix=$([ "$kind" = static ] && echo a || ([ "$target" = windows ] && echo dll || echo so))
lib=$dir/src/libvkattn.$suffix
programs=("$dir"/tests/c_api/vkattn_c_api_test* "$dir"/tests/c_api/vkattn_c_api_cache_test* "$dir"/tests/c_api/vkattn_c_api_errors_test*)
[ -e "$lib" ] || { echo "$lib was not built" >&2; exit 1; }
if [ "$kind" = shared ] && [ "$target" = windows ] &&
   x86_64-w64-mingw32-objdump -p "$lib" | grep -i "DLL Name: vulkan" > /dev/null; then  # not -q: objdump would die of SIGPIPE
  echo "$lib imports the Vulkan loader; it should open it at run time" >&2
  exit 1
fi
if [ "$kind" = shared ] && [ "$target" = aarch64 ] && readelf -d "$lib" | grep "NEEDED.*libvulkan" > /dev/null; then
  echo "$lib needs libvulkan; it should open it at run time" >&2
  exit 1
fi
for p in "$lib" "${programs[@]}"; do
  echo "$target $kind: $(basename "$p"): $(file -bL "$p" | cut -d, -f1-2)"
done
