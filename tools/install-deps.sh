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
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo > /dev/null; then
      echo "install-deps: missing packages, and not root without sudo; as root run:" >&2
      echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
      exit 1
    fi
    sudo="sudo"
  fi
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# jscpd, pinned, into the checkout (.tools/ is ignored by git), or from the copy in the
# user's cache (tools/tool-cache.sh) rather than from npm (15-20 s).
jscpd_version=4.0.5
here="$(cd "$(dirname "$0")/.." && pwd)"
. "$here/tools/tool-cache.sh"
jscpd_ok() {
  [ -x "$1/node_modules/.bin/jscpd" ] &&
    grep -q "\"version\": \"$jscpd_version\"" "$1/node_modules/jscpd/package.json" 2>/dev/null
}
if ! jscpd_ok "$here/.tools/jscpd" && ! tool_from_cache "jscpd-$jscpd_version" "$here/.tools/jscpd" jscpd_ok; then
  rm -rf "$here/.tools/jscpd"
  echo "installing: jscpd $jscpd_version (npm)"
  # Only the copy-paste check needs it (tools/check-duplicates.sh fails without it, so CI
  # cannot skip it): the build and the tests go on when the registry cannot be reached.
  if npm install --prefix "$here/.tools/jscpd" --no-audit --no-fund --silent "jscpd@$jscpd_version"; then
    tool_to_cache "jscpd-$jscpd_version" "$here/.tools/jscpd"
  else
    echo "install-deps: warning: jscpd could not be installed from npm; the copy-paste check" \
         "(tools/check-duplicates.sh) will fail until it is" >&2
  fi
fi

# A glslang that compiles GL_KHR_cooperative_matrix (the matrix kernels), when the system's
# cannot; without one the build goes on without those kernels (configure says so).
"$here/tools/glslang.sh"
