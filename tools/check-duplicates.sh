#!/usr/bin/env bash
# The copy-paste check: jscpd (installed by tools/install-deps.sh under .tools/) over the
# library's C++, its public headers and its shaders (GLSL: .comp and .glsl), for copies of
# 6 lines or more. Any copy fails: share the code (an include, a helper) instead. Usage:
# tools/check-duplicates.sh [paths...] (default: src include shaders).
set -euo pipefail
cd "$(dirname "$0")/.."

jscpd=.tools/jscpd/node_modules/.bin/jscpd
if [ ! -x "$jscpd" ]; then
  echo "jscpd is missing: run tools/install-deps.sh" >&2
  exit 1
fi
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(src include shaders)
report=$(mktemp -d)
trap 'rm -rf "$report"' EXIT
"$jscpd" --min-lines 6 --min-tokens 50 --mode mild \
  --format "cpp,c-header,glsl" --formats-exts "cpp:cpp,hpp;c-header:h;glsl:comp,glsl" \
  --reporters console,json --output "$report" --silent "${paths[@]}" > /dev/null
clones=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["duplicates"]))' "$report/jscpd-report.json")
if [ "$clones" -ne 0 ]; then
  "$jscpd" --min-lines 6 --min-tokens 50 --mode mild \
    --format "cpp,c-header,glsl" --formats-exts "cpp:cpp,hpp;c-header:h;glsl:comp,glsl" \
    --reporters console "${paths[@]}" 2>&1 | sed "s/\x1b\[[0-9;]*m//g" | grep -E "Clone found|^ - |^   " >&2 || true
  echo "copy-paste check: $clones copies of 6+ lines in ${paths[*]}" >&2
  exit 1
fi
echo "copy-paste check: no copies of 6+ lines in ${paths[*]}"
