#!/usr/bin/env bash
# Usage: check_exports.sh path/to/libvkattn.so | path/to/libvkattn.a
# A shared libvkattn exports the public API and nothing else: the C API (vkattn_*) and the
# C++ API's namespace (vkattn::..., with its classes' typeinfo and vtables), but no
# internals (vkattn::detail, vkattn::ref, vkattn::c_api) and nothing of other libraries
# (standard template instances, Vulkan), each under the version node of its SONAME (so
# that two minor versions in one process bind each to its own). Also checks that the API
# is exported at all.
# A static libvkattn defines no global symbol outside vkattn_* and vkattn:: (weak template
# and inline instances aside), so that none clashes with a consumer's own names, and no
# two members share a name (merging archives with ar x would lose one).
set -euo pipefail
lib=$1

if [[ "$lib" == *.a ]]; then
  dup=$(ar t "$lib" | sort | uniq -d)
  if [ -n "$dup" ]; then
    echo "$lib has members of the same name (a source file's name used twice):" >&2
    echo "$dup" >&2
    exit 1
  fi
  # Strong definitions only: T, D, B, R (and G, S); W, V and u are weak or unique instances.
  # AddressSanitizer's markers of global variables (__odr_asan...) are the compiler's.
  defined=$(nm -C --defined-only --extern-only "$lib")  # a failing nm fails the check
  bad=$(awk 'NF >= 3 && $2 ~ /^[TDBRGS]$/' <<< "$defined" | cut -d' ' -f3- |
    grep -Ev '^(vkattn_[a-z0-9_]+|vkattn::.*|[a-z ]+ for vkattn::.*|__odr_asan.*)$' || true)
  [ -n "$(grep -F vkattn_backend_create <<< "$defined")" ] || { echo "$lib defines no vkattn_backend_create" >&2; exit 1; }
  if [ -n "$bad" ]; then
    echo "$lib defines global symbols outside vkattn_* and vkattn:: (they may clash with a consumer's):" >&2
    echo "$bad" >&2
    exit 1
  fi
  echo "archive: $(ar t "$lib" | wc -l) members, every global definition vkattn's"
  exit 0
fi

raw=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-)
node=$(objdump -p "$lib" | awk '/SONAME/ {print $2}' | sed -E 's/^libvkattn\.so\.//')
unversioned=$(grep -v "@@VKATTN_${node}\$" <<< "$raw" | grep -v "^VKATTN_${node}\$" || true)
if [ -n "$node" ] && [ -n "$unversioned" ]; then
  echo "$lib exports symbols outside the version node VKATTN_${node}:" >&2
  echo "$unversioned" >&2
  exit 1
fi
symbols=$(sed -E 's/@@?VKATTN_[0-9.]+$//' <<< "$raw" | grep -v '^VKATTN_[0-9.]*$')

bad=$(echo "$symbols" | while IFS= read -r s; do
  name=${s%%(*}  # the symbol's own qualified name, without its parameter types
  case "$name" in
    vkattn_*) [[ "$name" =~ ^vkattn_[a-z0-9_]+$ ]] || echo "$s" ;;
    vkattn::detail::* | vkattn::ref::* | vkattn::c_api::*) echo "$s" ;;
    "typeinfo for vkattn::"* | "typeinfo name for vkattn::"* | "vtable for vkattn::"*)
      [[ "$name" =~ vkattn::(detail|ref|c_api):: ]] && echo "$s" ;;
    vkattn::*) ;;
    *) echo "$s" ;;
  esac
done)
if [ -n "$bad" ]; then
  echo "$lib exports symbols outside the public API:" >&2
  echo "$bad" >&2
  exit 1
fi
for want in vkattn_backend_create vkattn_last_error_message "vkattn::make_backend(" "typeinfo for vkattn::Error"; do
  if ! grep -qF "$want" <<< "$symbols"; then
    echo "$lib does not export $want" >&2
    exit 1
  fi
done
echo "exported symbols: $(echo "$symbols" | grep -c '^vkattn_') C, $(echo "$symbols" | grep -vc '^vkattn_') C++ (version node VKATTN_${node}); nothing else"
