# Sourced by tools/install-deps.sh and tools/glslang.sh: the tools they put under .tools/
# (ignored by git) keep a copy in the user's cache, as Mesa's shader cache and ccache's
# are, so that a fresh clone on a machine that had one copies it (a second) rather than
# fetching or building it again. Entries are named <tool>-<version>. .ci/run sources it
# for tool_cache_dir, to put the kernels' build cache beside them.
tool_cache_dir() { echo "${XDG_CACHE_HOME:-$HOME/.cache}/vkattn/$1"; }

# tool_from_cache ENTRY DEST CHECK: copies ENTRY to DEST when `CHECK <dir>` accepts it.
tool_from_cache() {
  local cache
  cache=$(tool_cache_dir "$1")
  "$3" "$cache" || return 1
  rm -rf "$2" && mkdir -p "$(dirname "$2")" && cp -a "$cache" "$2"
}

# tool_to_cache ENTRY SRC: keeps a copy of SRC as ENTRY; a cache that cannot be written
# is not an error.
tool_to_cache() {
  local cache
  cache=$(tool_cache_dir "$1")
  { rm -rf "$cache" && mkdir -p "$(dirname "$cache")" && cp -a "$2" "$cache"; } || true
}
