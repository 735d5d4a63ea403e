#!/usr/bin/env bash
# Makes sure the build can compile the matrix kernels (GL_KHR_cooperative_matrix, which
# glslang knows from 13.0 on; Debian 12 has 12.0). When neither $VKATTN_COOPMAT_GLSLANG nor
# the system's glslangValidator compiles cmake/coopmat_probe.comp, it fetches Debian 13's
# glslang source (the version pinned below) from Debian's archive and builds its
# glslangValidator once into .tools/glslang/ (ignored by git), where configure looks for it.
# tools/install-deps.sh runs it; nothing of glslang's source is kept.
#
# The source comes through apt with a sources list, lists and cache of its own (nothing on
# the system changes): apt checks the archive's signature and the files' checksums, and
# this script checks the tarball's SHA-256 against the pin as well. Where no capable
# glslang can be had (no apt, no network, the pinned version gone from the archive), it
# says so and exits 0: the build then goes on without the matrix kernels, and configure
# says so too. Takes about a minute of 2 cores, once; later runs find the binary (in the
# checkout, or a copy in the user's cache) and return at once.
#   tools/glslang.sh          make one available if none is
#   tools/glslang.sh --force  fetch and build even when a capable one exists (checks this script)
set -euo pipefail

version=15.1.0+1.4.309.0-1  # Debian 13 (trixie)
upstream=${version%-*}
sha256=180f17ea51e6b71bf57b9e0fea78ba3ecd76e3ec8e4c91f0771b922eb22bf4b2  # glslang_$upstream.orig.tar.gz
suite=trixie
archive=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

here=$(cd "$(dirname "$0")/.." && pwd)
probe=$here/cmake/coopmat_probe.comp
dest=$here/.tools/glslang
# A copy of what it built stays in the user's cache (tools/tool-cache.sh): a fresh clone
# on this machine copies it rather than building it again.
. "$here/tools/tool-cache.sh"
force=0
[ "${1:-}" = "--force" ] && force=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
capable() { [ -x "$1" ] && "$1" --quiet --target-env vulkan1.2 -o "$work/probe.spv" "$probe" > /dev/null 2>&1; }
built() { [ "$(cat "$1/VERSION" 2> /dev/null)" = "$version" ] && capable "$1/bin/glslangValidator"; }
# The build goes on without the matrix kernels: not a failure of the caller's command.
give_up() {
  echo "glslang: $*; the matrix kernels will not be built (set VKATTN_COOPMAT_GLSLANG to a glslangValidator of 13.0 or later)" >&2
  exit 0
}

if [ $force = 0 ]; then
  if [ -n "${VKATTN_COOPMAT_GLSLANG:-}" ]; then
    capable "$VKATTN_COOPMAT_GLSLANG" && exit 0
    echo "glslang: VKATTN_COOPMAT_GLSLANG=$VKATTN_COOPMAT_GLSLANG does not compile GL_KHR_cooperative_matrix" >&2
    exit 1
  fi
  system=$(command -v glslangValidator || true)
  [ -n "$system" ] && capable "$system" && exit 0
  built "$dest" && exit 0
  # One this script built in another checkout on this machine (below).
  if tool_from_cache "glslang-$version" "$dest" built; then
    echo "glslang: $dest/bin/glslangValidator (from $(tool_cache_dir "glslang-$version"))"
    exit 0
  fi
fi

command -v apt-get > /dev/null || give_up "no capable glslangValidator, and no apt-get to fetch Debian's source"
[ -r "$keyring" ] || give_up "no capable glslangValidator, and no $keyring to check Debian's archive with"
for tool in cmake make c++ python3; do
  command -v $tool > /dev/null || give_up "building glslang needs $tool"
done
echo "glslang: fetching Debian's glslang $version source (apt, $archive $suite) to build glslangValidator into .tools/glslang"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
echo "deb-src [signed-by=$keyring] $archive $suite main" > "$work/sources.list"
apt_options=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=$(id -un)")
# apt-get update exits 0 when a fetch fails; the index it leaves says whether it worked.
apt-get "${apt_options[@]}" -qq update > "$work/apt.log" 2>&1 || true
compgen -G "$work/lists/*_Sources*" > /dev/null ||
  { cat "$work/apt.log" >&2; give_up "could not fetch Debian's $suite source index from $archive"; }
(cd "$work/src" && apt-get "${apt_options[@]}" -qq source --download-only "glslang=$version") > "$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; give_up "apt-get source glslang=$version failed"; }
tarball=$work/src/glslang_$upstream.orig.tar.gz
echo "$sha256  $tarball" | sha256sum --check --quiet ||
  give_up "glslang_$upstream.orig.tar.gz does not have the pinned SHA-256"

# glslangValidator alone: no SPIRV-Tools (ENABLE_OPT=OFF: its optimizer is not wanted),
# no HLSL, no tests; at -O1, which builds in 60 s against 82 at -O2 here and compiles the
# few kernels that need it as fast. Debian's patches only touch pkg-config files, so the
# upstream tarball is built as it is.
tar -xzf "$tarball" -C "$work/src"
echo "glslang: building glslangValidator $upstream (about a minute on 2 cores)"
cmake -S "$work/src/glslang-$upstream" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DENABLE_OPT=OFF -DENABLE_HLSL=OFF \
  -DGLSLANG_TESTS=OFF -DBUILD_EXTERNAL=OFF -DENABLE_SPVREMAPPER=OFF -DGLSLANG_ENABLE_INSTALL=OFF > "$work/build.log" 2>&1 &&
  cmake --build "$work/build" -j"$(nproc)" --target glslang-standalone >> "$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log" >&2; give_up "building glslang $upstream failed"; }
capable "$work/build/StandAlone/glslang" || give_up "the glslang built from $upstream does not compile the probe"

rm -rf "$dest"
mkdir -p "$dest/bin"
cp "$work/build/StandAlone/glslang" "$dest/bin/glslangValidator"
echo "$version" > "$dest/VERSION"
tool_to_cache "glslang-$version" "$dest"
echo "glslang: $dest/bin/glslangValidator ($("$dest/bin/glslangValidator" --version | head -n 1))"
