#!/usr/bin/env bash
# Formats the C and C++ sources with .clang-format (clang-format-14, Debian 12's; installed
# by tools/install-deps.sh). tools/format.sh --check changes nothing and fails listing the
# files that are not formatted (CI runs it). GLSL is formatted by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

format=clang-format-14
if ! command -v "$format" > /dev/null; then
  echo "$format is missing: run tools/install-deps.sh" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' | grep -v '^shaders/')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$format" --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'not formatted (run tools/format.sh): %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files as .clang-format has them"
else
  "$format" -i "${files[@]}"
fi
