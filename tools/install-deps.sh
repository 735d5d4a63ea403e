#!/usr/bin/env bash
# Installs the Debian 12 packages vkattn needs to build, test and run on a machine without
# a GPU (Mesa's lavapipe is the Vulkan device there). Only missing packages are
# installed; nothing happens when all are present.
set -euo pipefail

packages=(cmake make gcc g++ pkg-config python3 libvulkan-dev glslang-tools spirv-tools
          mesa-vulkan-drivers vulkan-validationlayers vulkan-tools libgtest-dev libbenchmark-dev
          libpng-dev)
# The Python module (python/): pybind11 and the development files build it; numpy runs it;
# pytest and torch (the tests' reference) test it; matplotlib draws the sample's heatmap.
packages+=(python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-torch
           python3-matplotlib)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
