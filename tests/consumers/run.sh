#!/usr/bin/env bash
# Usage: tests/consumers/run.sh BUILD_DIR
# Installs the vkattn of BUILD_DIR (static or shared, as configured) into a temporary
# prefix and builds, out of tree, and runs each consumer: find_package against the prefix
# and against the build tree itself (and a request for another major version, or before
# 1.0 another minor one, which must fail at configure time), pkg-config, and
# add_subdirectory of this source tree (same library kind); then the C API's test compiled
# as C11 against the installed library through pkg-config, and through find_package from a
# project that enables C alone (also inside a function: the static package refuses it by
# name), and C++17 against the headers. A shared build also gets its exported symbols
# checked and the Python ctypes test, a static one its archive's symbols. When the Python
# module was built, it is imported from the prefix and run.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
# Under the build directory: where CI compiles through ccache, paths under its checkout are
# hashed relative to the compile's directory, so the next run's builds here hit its cache.
work=$(mktemp -d "$build/consumers.XXXXXX")
# cmake --install writes the build's install_manifest.txt: put back the user's own (an
# uninstall reads it), or remove ours.
manifest=$build/install_manifest.txt
[ -e "$manifest" ] && cp "$manifest" "$work/install_manifest.txt"
restore() {
  if [ -e "$work/install_manifest.txt" ]; then cp "$work/install_manifest.txt" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$work"
}
trap restore EXIT
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > /dev/null
libdir=$(dirname "$(find "$prefix" -name vkattn.pc)")/..
libdir=$(cd "$libdir" && pwd)
shared=OFF
[ -e "$libdir/libvkattn.so" ] && shared=ON
step() { echo "-- consumers ($( [ $shared = ON ] && echo shared || echo static )): $*"; }
step "installed to a temporary prefix"
export PKG_CONFIG_PATH=$libdir/pkgconfig
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The consumers need nothing of the build tree: no shader files, no glslang.
[ -z "$(find "$prefix" -name '*.spv' -o -name '*.comp')" ]

if [ -x "$prefix/bin/vkattn-info" ]; then
  step "vkattn-info --version"
  [ "$("$prefix/bin/vkattn-info" --version)" = "vkattn $(pkg-config --modversion vkattn)" ]
fi

version() { sed -n "s/^#define VKATTN_VERSION_$1 \\([0-9]*\\)$/\\1/p" "$prefix/include/vkattn/version.h"; }
major=$(version MAJOR) minor=$(version MINOR)

step "find_package"
cmake -S "$src/tests/consumers/find_package" -B "$work/find_package" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DVKATTN_WANTED_VERSION="$major.$minor" > /dev/null
cmake --build "$work/find_package" -j"$jobs" > /dev/null
"$work/find_package/consumer"

step "find_package against the build tree (no install)"
cmake -S "$src/tests/consumers/find_package" -B "$work/find_package_build_tree" -DCMAKE_BUILD_TYPE=Release \
  -Dvkattn_DIR="$build" -DVKATTN_WANTED_VERSION="$major.$minor" > /dev/null
cmake --build "$work/find_package_build_tree" -j"$jobs" > /dev/null
"$work/find_package_build_tree/consumer"

# Another major version; before 1.0 another minor one too (either may change the ABI).
wrong=("$((major + 1)).0")
[ "$major" = 0 ] && wrong+=("0.$((minor + 1))")
for v in "${wrong[@]}"; do
  step "find_package asking for vkattn $v fails at configure time"
  if cmake -S "$src/tests/consumers/find_package" -B "$work/wrong_version" -DCMAKE_PREFIX_PATH="$prefix" \
       -DVKATTN_WANTED_VERSION="$v" > "$work/wrong_version.log" 2>&1; then
    echo "configure succeeded with vkattn $v requested" >&2
    exit 1
  fi
  grep -q "requested version \"$v\"" "$work/wrong_version.log"
  rm -rf "$work/wrong_version"
done

step "pkg-config"
static_flag=""
[ $shared = OFF ] && static_flag=--static
mkdir -p "$work/pkg_config"
make -s -C "$work/pkg_config" -f "$src/tests/consumers/pkg_config/Makefile" PKG_CONFIG_FLAGS="$static_flag"
"$work/pkg_config/consumer"

step "add_subdirectory"
# No optimization: this proves the subproject builds and links; the library's code is the
# one the tests run, optimized, elsewhere. As a unity build (sources compiled several to a
# file), which a consumer may ask of its whole tree, and which CI's compile-only builds
# use: no two of the library's sources may define the same internal name.
cmake -S "$src/tests/consumers/add_subdirectory" -B "$work/add_subdirectory" -DCMAKE_BUILD_TYPE= \
  -DCMAKE_UNITY_BUILD=ON -DVKATTN_SOURCE_DIR="$src" -DBUILD_SHARED_LIBS=$shared > /dev/null
cmake --build "$work/add_subdirectory" -j"$jobs" > /dev/null
[ -z "$(find "$work/add_subdirectory" -name 'vkattn_tests' -o -name '_vkattn*')" ]  # the library alone
"$work/add_subdirectory/consumer"

step "the C API's test, C11, through pkg-config"
for t in test_c_api test_c_api_errors; do
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$src/tests/c_api/$t.c" -o "$work/$t" \
    $(pkg-config --cflags --libs $static_flag vkattn) -lm
  "$work/$t"
done

step "find_package from a C project (no CXX enabled)"
cmake -S "$src/tests/consumers/find_package_c" -B "$work/find_package_c" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DVKATTN_WANTED_VERSION="$major.$minor" > /dev/null
cmake --build "$work/find_package_c" -j"$jobs" > /dev/null
"$work/find_package_c/c_consumer"

step "find_package from a C project, inside a function"
if [ $shared = ON ]; then
  cmake -S "$src/tests/consumers/find_package_c" -B "$work/find_package_c_fn" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DVKATTN_WANTED_VERSION="$major.$minor" -DVKATTN_IN_FUNCTION=ON > /dev/null
  cmake --build "$work/find_package_c_fn" -j"$jobs" > /dev/null
  "$work/find_package_c_fn/c_consumer"
elif cmake -S "$src/tests/consumers/find_package_c" -B "$work/find_package_c_fn" -DCMAKE_PREFIX_PATH="$prefix" \
     -DVKATTN_WANTED_VERSION="$major.$minor" -DVKATTN_IN_FUNCTION=ON > "$work/find_package_c_fn.log" 2>&1; then
  echo "configure succeeded: the static package enabled CXX inside a function" >&2
  exit 1
else
  tr -s ' \n' ' ' < "$work/find_package_c_fn.log" | grep -q "add CXX to project(), or call find_package(vkattn) outside"
fi

step "C++17: the C++ headers refuse it by name, the C header takes it"
for h in vkattn.hpp error.hpp; do
  if echo "#include <vkattn/$h>" | c++ -std=c++17 -fsyntax-only -I"$prefix/include" -x c++ - 2> "$work/cxx17.log"; then
    echo "vkattn/$h compiled as C++17" >&2
    exit 1
  fi
  grep -q "need C++20" "$work/cxx17.log"
done
echo "#include <vkattn/vkattn.h>" | c++ -std=c++17 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$prefix/include" -x c++ -

if [ $shared = ON ]; then
  step "exported symbols"
  "$src/tests/consumers/check_exports.sh" "$libdir/libvkattn.so"
  step "Python ctypes"
  python=/usr/bin/python3
  [ -x $python ] || python=python3
  $python "$src/tests/c_api/test_ctypes.py" "$libdir/libvkattn.so"
else
  step "the archive's global symbols"
  "$src/tests/consumers/check_exports.sh" "$libdir/libvkattn.a"
fi

package=$(find "$prefix" -path '*/vkattn/__init__.py' | head -1)
if [ -n "$package" ]; then
  step "the Python module, imported from the prefix (no build tree, no LD_LIBRARY_PATH)"
  python=/usr/bin/python3
  [ -x $python ] || python=python3
  (cd "$work" && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$(dirname "$package")")" $python -c '
import numpy as np, vkattn
assert vkattn.__file__.startswith("'"$prefix"'"), vkattn.__file__
x = np.random.default_rng(0).standard_normal((2, 2, 8)).astype(np.float32)
outs = []
for kind in ("cpu", "vulkan"):
    b = vkattn.Backend(kind)
    t = b.tensor(x)
    with b.commands() as cmd:
        out = cmd.attention(t, t, t, q_positions=[0, 1])
    outs.append(out.numpy())
assert np.allclose(outs[0], outs[1], atol=1e-5), outs
')
fi
