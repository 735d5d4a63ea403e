#!/usr/bin/env bash
# Installs the Debian 12 packages vkattn needs to build, test and run on a machine without
# a GPU (Mesa's lavapipe is the Vulkan device there). Only missing packages are
# installed; nothing happens when all are present. It also puts the copy-paste checker
# (jscpd, from the npm registry) under .tools/, and, where the system's glslang cannot
# compile the matrix kernels (Debian 12's), builds a newer glslangValidator from Debian's
# archive into .tools/glslang/ once (tools/glslang.sh: about a minute of 2 cores).
set -euo pipefail

packages=(cmake make gcc g++ pkg-config python3 libvulkan-dev glslang-tools spirv-tools
          mesa-vulkan-drivers vulkan-validationlayers vulkan-tools libgtest-dev libbenchmark-dev
          libpng-dev clang-format-14)
# The Python module (python/): pybind11 and the development files build it; numpy runs it;
# pytest and torch (the tests' reference) test it; matplotlib draws the sample's heatmap.
packages+=(python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-torch
           python3-matplotlib)

# The other builds CI makes: clang, and the cross builds for Windows (MinGW-w64) and
# aarch64 Linux (tools/cross-build.sh, which reads what it built with file).
packages+=(clang g++-mingw-w64-x86-64-posix g++-aarch64-linux-gnu file)

# ccache: CI's builds compile through it (.ci/run), so a machine that ran them before
# recompiles only what changed.
packages+=(ccache)

# The copy-paste check (tools/check-duplicates.sh) runs jscpd from the npm registry: Node
# and npm from Debian unless the machine has them already (from any source).
command -v npm > /dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# jscpd, pinned, into the checkout (.tools/ is ignored by git). A copy is kept in the
# user's cache (as Mesa's shader cache and ccache's are), so that a fresh clone on a
# machine that had it copies it (a second) rather than installing it from npm (15-20 s).
jscpd_version=4.0.5
here="$(cd "$(dirname "$0")/.." && pwd)"
jscpd_cache=${XDG_CACHE_HOME:-$HOME/.cache}/vkattn/jscpd-$jscpd_version
jscpd_ok() {
  [ -x "$1/node_modules/.bin/jscpd" ] &&
    grep -q "\"version\": \"$jscpd_version\"" "$1/node_modules/jscpd/package.json" 2>/dev/null
}
if ! jscpd_ok "$here/.tools/jscpd"; then
  rm -rf "$here/.tools/jscpd"
  mkdir -p "$here/.tools"
  if jscpd_ok "$jscpd_cache"; then
    cp -a "$jscpd_cache" "$here/.tools/jscpd"
  else
    echo "installing: jscpd $jscpd_version (npm)"
    npm install --prefix "$here/.tools/jscpd" --no-audit --no-fund --silent "jscpd@$jscpd_version"
    rm -rf "$jscpd_cache" && mkdir -p "$(dirname "$jscpd_cache")" && cp -a "$here/.tools/jscpd" "$jscpd_cache" || true
  fi
fi

# A glslang that compiles GL_KHR_cooperative_matrix (the matrix kernels), when the system's
# cannot; without one the build goes on without those kernels (configure says so).
"$here/tools/glslang.sh"
