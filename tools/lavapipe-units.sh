#!/usr/bin/env bash
# The matrix kernels on real cooperative matrices, without a GPU: runs the test program of
# build dir $1 (a native Linux build with the matrix kernels) with VKATTN_MATRIX=on under a
# lavapipe that has VK_KHR_cooperative_matrix (8x8x8 f16 x f16 + f32 -> f32, the shape
# attn_mt_cm8 takes) and VK_NV_cooperative_matrix2 (attn_mt2's, required there:
# VKATTN_TEST_REQUIRE_NV2). Debian 12's Mesa (22.3) has none, so the program runs in a Debian 13
# chroot with Mesa from trixie-backports (26.1 when this was written) and its validation
# layer (1.4, which knows the extension): the chroot is built once with debootstrap (about
# a minute and 700 MB) and kept in the tool cache (tools/tool-cache.sh). Needs root, for
# debootstrap, chroot and bind mounts. The rest of the arguments go to the program (a
# --gtest_filter); the program and the checkout are bind-mounted at the same paths inside.
# It runs as GoogleTest shards side by side, one per core (VKATTN_UNITS_JOBS sets how many;
# 1 runs the program alone, its output as it goes).
set -euo pipefail
build=$(realpath "${1:?usage: tools/lavapipe-units.sh BUILD_DIR [test program arguments]}")
shift
repo=$(realpath "$(dirname "$0")/..")
program=$build/tests/vkattn_tests
[ -x "$program" ] || { echo "lavapipe-units: no test program at $program" >&2; exit 1; }
jobs=${VKATTN_UNITS_JOBS:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "lavapipe-units: VKATTN_UNITS_JOBS=$jobs is not a count of 1 or more" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "lavapipe-units: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
source "$repo/tools/tool-cache.sh"
root=${VKATTN_LAVAPIPE_ROOT:-$(tool_cache_dir lavapipe-trixie)}
mirror=${VKATTN_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Every mount below the chroot, innermost first; rm -rf never runs while one is up.
mounts=()
unmount_all() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; --i)); do umount "${mounts[i]}" || umount -l "${mounts[i]}" || true; done
}
trap unmount_all EXIT
bind() {  # bind $1 at the same path inside the chroot
  mkdir -p "$root$1"
  mount --bind "$1" "$root$1"
  mounts+=("$root$1")
}

if [ ! -f "$root/.vkattn-ready" ]; then
  command -v debootstrap > /dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }
  if [ -e "$root" ]; then
    if grep -q " $root" /proc/mounts; then
      echo "lavapipe-units: $root has mounts left; unmount them first" >&2
      exit 1
    fi
    rm -rf --one-file-system "$root"
  fi
  echo "lavapipe-units: building a Debian 13 chroot with trixie-backports' Mesa in $root"
  rm -rf --one-file-system "$root.tmp"  # an interrupted build's
  debootstrap --variant=minbase trixie "$root.tmp" "$mirror" > "$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; exit 1; }
  echo "deb $mirror trixie-backports main" > "$root.tmp/etc/apt/sources.list.d/backports.list"
  chroot "$root.tmp" apt-get update -q > /dev/null
  chroot "$root.tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -t trixie-backports mesa-vulkan-drivers libvulkan1 vulkan-validationlayers > "$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; exit 1; }
  touch "$root.tmp/.vkattn-ready"
  mv "$root.tmp" "$root"
fi

mkdir -p "$root/proc"
mount -t proc proc "$root/proc"
mounts+=("$root/proc")
bind "$repo"
case "$build/" in "$repo"/*) ;; *) bind "$build" ;; esac
# Only lavapipe: the chroot's other drivers would look for hardware that is not there.
# The units must be taken there: CoopmatUnits fails rather than skips without them.
run() {
  chroot "$root" env VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json VKATTN_MATRIX=on VKATTN_REQUIRE_VULKAN=1 \
    VKATTN_TEST_REQUIRE_MATRIX_UNITS=1 VKATTN_TEST_REQUIRE_NV2=1 "$@"
}
# lavapipe builds a pipeline on the thread that asks for it, so one test program keeps one
# core busy (a fresh machine's units step: 28 minutes, nearly all of it LLVM compiling
# attn_mt2's pipelines). GoogleTest's shards (VKATTN_UNITS_JOBS of them, default one per
# core), side by side, each its own output, printed in turn; any shard failing fails.
if [ "$jobs" = 1 ]; then
  run "$program" "$@"
  exit
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"; unmount_all' EXIT
pids=()
for ((i = 0; i < jobs; ++i)); do
  run GTEST_TOTAL_SHARDS="$jobs" GTEST_SHARD_INDEX="$i" "$program" "$@" > "$logs/$i" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < jobs; ++i)); do
  wait "${pids[i]}" || failed=1
  echo "== lavapipe-units: shard $((i + 1)) of $jobs =="
  cat "$logs/$i"
done
exit "$failed"
