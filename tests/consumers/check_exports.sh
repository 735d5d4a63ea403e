#!/usr/bin/env bash
# Usage: check_exports.sh path/to/libvkattn.so
# A shared libvkattn exports the public API and nothing else: the C API (vkattn_*) and the
# C++ API's namespace (vkattn::..., with its classes' typeinfo and vtables), but no
# internals (vkattn::detail, vkattn::ref, vkattn::c_api) and nothing of other libraries
# (standard template instances, Vulkan). Also checks that the API is exported at all.
set -euo pipefail
lib=$1
symbols=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-)

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
echo "exported symbols: $(echo "$symbols" | grep -c '^vkattn_') C, $(echo "$symbols" | grep -vc '^vkattn_') C++; nothing else"
