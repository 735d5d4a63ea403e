#!/usr/bin/env bash
# The benchmarks' smoke run: the first case of every benchmark family (a BM_ function and
# its capture) of each benchmark program in build dir $1, one iteration each
# ($VKATTN_BENCH_ITERATIONS=1). A program that fails, or a case that reports an error (the
# benchmarks compare their results with the CPU reference and say so), fails the run:
# 0.14.1 broke the host benchmark's replay cases, and no run noticed for three releases.
# Its figures mean nothing; docs/benchmarks.md says how to measure.
# Left out ($BENCH_SMOKE_SKIP, a regex of names), each half a minute or more on lavapipe
# for code a case that runs covers: BM_prefill_dsa (BM_decode_dsa runs it with one token
# instead of eight) and BM_ring_vs_plain/cpu_prefill (vulkan_prefill, on the CPU backend).
set -euo pipefail
build=${1:?usage: tools/bench-smoke.sh BUILD_DIR}
skip=${BENCH_SMOKE_SKIP-^BM_prefill_dsa/|^BM_ring_vs_plain/cpu_prefill/}
shopt -s nullglob
programs=("$build"/bench/vkattn-bench-*)
[ ${#programs[@]} -gt 0 ] || { echo "bench-smoke: no benchmark programs in $build/bench" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
for program in "${programs[@]}"; do
  # A family: the name's parts before the first with an argument (name:value).
  filter=$(VKATTN_BENCH_ITERATIONS=1 "$program" --benchmark_list_tests | { grep -Ev "${skip:-^$}" || true; } |
    awk -F/ '{ key = $1; for (i = 2; i <= NF && index($i, ":") == 0; ++i) key = key "/" $i }
             !seen[key]++ { gsub(/[][().*+?^$|{}\\]/, "\\\\&"); printf "%s^%s$", (n++ ? "|" : ""), $0 }')
  if [ -z "$filter" ]; then  # an empty filter would run every case
    echo "bench-smoke: $(basename "$program"): no case left to run" >&2
    failed=1
    continue
  fi
  cases=$(tr '|' '\n' <<< "$filter" | wc -l)
  start=$SECONDS
  if ! VKATTN_BENCH_ITERATIONS=1 "$program" --benchmark_filter="$filter" > "$log" 2>&1; then
    echo "bench-smoke: $(basename "$program") failed:" >&2
    cat "$log" >&2
    failed=1
    continue
  fi
  if grep -q "ERROR OCCURRED" "$log"; then
    echo "bench-smoke: $(basename "$program"): a case reported an error:" >&2
    grep "ERROR OCCURRED" "$log" >&2
    failed=1
  fi
  printf 'bench-smoke: %-24s %3d cases, %4d s\n' "$(basename "$program")" "$cases" $((SECONDS - start))
done
exit $failed
