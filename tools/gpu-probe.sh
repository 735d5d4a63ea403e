#!/usr/bin/env bash
# The decode probes for a GPU run (docs/gpu.md, "Probes"): run from the GPU bundle as
#   bash .gpu/run.sh probe            (VKATTN_GPU_BIN: the bundled programs)
# or from a build tree as
#   VKATTN_GPU_BIN=build bash tools/gpu-probe.sh
# Each case runs vkattn-bench-decode (or -attention) in its own process with its own
# $VKATTN_DECODE / $VKATTN_PREFILL / $VKATTN_MATRIX, and one table comes out: case, time
# per op, K and V bytes over the same run's copy bandwidth, and the kernel's and merge's
# dispatch times. PROBE_KEYS (default "1024 4096 16384") and PROBE_MIN_TIME (seconds per
# case, default 0.1) make it shorter on slow devices (PROBE_WARMUP, default 0.3 s of
# wall-clock time, runs each case untimed first: an idle H200 drops its SM clock to 345 MHz
# while the CPU checks a case, and a 4kx4k prefill timed from there measured 3.8x slow), as
# PROBE_PREFILL (a
# benchmark filter, default the three prefill sizes) does for the prefill and matrix
# sections; PROBE_ONLY (a list of decode, grids, mla, prefill, matrix, paged, ggml; default
# all) runs some sections alone (decode: D3 and D4; grids: D1, D2 and one split a head). The decode section's step rows report each 32-layer step's time per
# layer, dispatches and barriers after the table's columns. A .ggml/run.sh beside .gpu (ggml's test-backend-ops, built outside the
# repository) is run last when present. Every case that reports an error is listed at the
# end with its whole message; one whose results differ from the CPU reference, or a
# benchmark process that fails, makes the exit status 1.
# PROBE_DEADLINE (seconds from the start; default none) ends the probe in time for a boxed
# call: each benchmark process may run only until the deadline (and PROBE_CASE_TIMEOUT
# seconds, default 150, at most), none starts with less than PROBE_MIN_LEFT seconds left
# (default 20: a process's device set-up and CPU references take that), the cases after
# it are listed as skipped, and the summary still prints. SIGTERM or SIGINT stops the case
# in flight, keeps the cases it finished and prints the summary. The table, the failures
# and each process's stderr stay in $OUT.
# PROBE_ITERATIONS (default 2000) fixes the iterations of every case of the decode, grids,
# mla and paged sections: Google Benchmark's min_time counts device time, so a case of a
# few microseconds would run tens of thousands of submits (each a round trip of 0.2-1 ms).
set -uo pipefail
bin=${VKATTN_GPU_BIN:?set VKATTN_GPU_BIN to the directory holding bench/ and samples/}
keys=${PROBE_KEYS:-1024 4096 16384}
min_time=${PROBE_MIN_TIME:-0.1}
iterations=${PROBE_ITERATIONS:-2000}
iters=""  # VKATTN_BENCH_ITERATIONS for the section running: $iterations, or min_time's count
min_left=${PROBE_MIN_LEFT:-20}
for word in ${PROBE_ONLY:-}; do
  case $word in
    decode | grids | mla | prefill | matrix | paged | ggml) ;;
    *) echo "gpu-probe: PROBE_ONLY: no section '$word' (valid: decode grids mla prefill matrix paged ggml)" >&2; exit 2 ;;
  esac
done
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
[ -n "${OUT:-}" ] || echo "probe output in $out"
start=$SECONDS
deadline=${PROBE_DEADLINE:-}
case_timeout=${PROBE_CASE_TIMEOUT:-150}
# One set of files per PROBE_ONLY, so that two probes in one call keep both.
suffix=${PROBE_ONLY:+-${PROBE_ONLY// /-}}
table="$out/probe-table$suffix.txt"
failures="$out/probe-failures$suffix.txt"
errors="$out/probe-stderr$suffix.txt"
stats="$out/pipeline-stats$suffix.txt"
: > "$table"; : > "$failures"; : > "$errors"; : > "$stats"
skipped=0
line_buffered=()
command -v stdbuf > /dev/null && line_buffered=(stdbuf -oL)
keys_re=$(echo "$keys" | tr ' ' '|')

echo "== device"
timeout -k 5 60 "$bin/samples/vkattn-info" 2>&1 | head -12
if [ -x "$bin/vulkaninfo" ]; then
  timeout -k 5 60 "$bin/vulkaninfo" 2>/dev/null | grep -E "VK_KHR_pipeline_executable_properties|vulkanMemoryModel |shaderSMCount|shaderWarpsPerSM" | sort -u
fi
smi=""
if command -v nvidia-smi >/dev/null; then
  timeout -k 5 30 nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 100 > "$out/smi$suffix.csv" 2>/dev/null &
  smi=$!
fi

# run LABEL ENV... -- PROGRAM FILTER: one process, its rows appended to the table as
# "label  name  time_us  kv_copy_ratio  main_us  merge_us  occupancy_ratio  extra" (time_us:
# the op_us counter where a case sets one, a list's ops divided out; else the case's time).
# Its JSON report is read by rows.py below, which also reads a report cut short by a time
# limit. A case that reports an error gets its whole message on a line of its own and in
# $failures: one that differs from the CPU reference, or a process that exits non-zero,
# fails the probe. Each case is warmed up VKATTN_BENCH_WARMUP seconds of wall-clock time
# (the benchmarks' own warm-up counts device time, which for short lists is a sliver of
# each submit's round trip: 0.3 s of it took minutes).
rows_py=$(mktemp --suffix=.py)
cat > "$rows_py" <<'PY'
import json, sys
label, report, failures = sys.argv[1:4]
text = open(report).read()
try:
    runs = json.loads(text).get("benchmarks", [])
except ValueError:  # cut short: keep the runs it finished
    cut = text.rfind("\n    }")
    try:
        runs = json.loads(text[:cut + 6] + "\n  ]\n}").get("benchmarks", []) if cut >= 0 else []
    except ValueError:
        runs = []
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
def num(r, k, fmt):
    return fmt % r[k] if k in r else "-"
with open(failures, "a") as fail:
    for r in runs:
        name = r.get("name", "?")
        if r.get("error_occurred"):
            msg = r.get("error_message", "")
            line = "%s [%s] %s: %s" % ("FAIL" if "differ" in msg else "ERROR", label, name, msg)
            print(line)
            fail.write(line + "\n")
            continue
        t = r["op_us"] if "op_us" in r else r.get("real_time", 0) * scale.get(r.get("time_unit", "ns"), 1e-3)
        extra = "%.3g TFLOP/s" % (r["gflops"] / 1e3) if "gflops" in r else ""
        if "layer_us" in r:
            extra = "%.2f us a layer, %d dispatches, %d barriers" % (r["layer_us"], r.get("dispatches", 0), r.get("barriers", 0))
        if "copy_GBps" in r:  # the same process's copy rate, which kv/copy divides by
            extra += (", " if extra else "") + "copy %.3g GB/s" % r["copy_GBps"]
        if "paged_over_ring" in r:  # vkattn-bench-paged: paged/ring and the two figures behind it
            extra += "paged/ring %.3f" % r["paged_over_ring"]
            if "ring_us" in r:
                extra += " (ring %.1f us, paged %.1f us)" % (r["ring_us"], r["paged_us"])
            if "ring_MiB" in r:
                extra += " (ring %.1f MiB, paged %.1f MiB)" % (r["ring_MiB"], r["paged_MiB"])
        print("%-34s %-52s %10.2f %8s %9s %9s %8s %s" % (label, name, t, num(r, "kv_copy_ratio", "%.3g"),
              num(r, "main_us", "%.2f"), num(r, "merge_us", "%.2f"), num(r, "occupancy_ratio", "%.3g"), extra))
PY
# The case in flight (for the trap): its process, and what finish_case needs.
child="" cur=()
run() {
  local label=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local prog=$1 filter=$2 status report err limit=$case_timeout
  if [ -n "$deadline" ]; then
    local left=$((deadline - (SECONDS - start)))
    if [ "$left" -lt "$min_left" ]; then
      echo "SKIPPED [$label] (PROBE_DEADLINE=$deadline s: $left s left, under PROBE_MIN_LEFT=$min_left)" | tee -a "$failures"
      skipped=$((skipped + 1))
      return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  report=$(mktemp)
  err=$(mktemp)
  # Line-buffered, so that a process stopped by its time limit leaves the cases it finished.
  # In the background and waited for, so that a SIGTERM reaches the trap at once; timeout
  # in the foreground mode stays in the probe's process group, so that killing the group
  # kills the benchmark too (it would otherwise hold the GPU into the next call).
  timeout --foreground -k 5 "$limit" ${line_buffered[@]+"${line_buffered[@]}"} env VKATTN_BENCH_WARMUP="${PROBE_WARMUP:-0.3}" \
      ${iters:+VKATTN_BENCH_ITERATIONS=$iters} ${envs[@]+"${envs[@]}"} "$bin/bench/$prog" \
      --benchmark_filter="$filter" --benchmark_min_time="$min_time" --benchmark_format=json > "$report" 2> "$err" &
  child=$!
  cur=("$label" "$prog" "$limit" "$report" "$err")
  wait "$child"
  status=$?
  child=""
  finish_case "$status" "${cur[@]}"
}

# finish_case STATUS LABEL PROGRAM LIMIT REPORT STDERR: the process's rows into the table,
# its stderr and failures into $OUT.
finish_case() {
  local status=$1 label=$2 prog=$3 limit=$4 report=$5 err=$6
  grep -h "pipeline stats" "$err" | awk -v l="$label" '{ print "[" l "] " $0 }' >> "$stats"
  { echo "== [$label] $prog (status $status)"; cat "$err"; } >> "$errors"
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "CUT [$label] $prog stopped after $limit s (PROBE_DEADLINE or PROBE_CASE_TIMEOUT); the cases it finished are kept" |
      tee -a "$failures"
  elif [ "$status" -eq 143 ]; then
    echo "CUT [$label] $prog stopped by a signal to the probe; the cases it finished are kept" | tee -a "$failures"
  elif [ "$status" -ne 0 ]; then
    echo "FAIL [$label] $prog exited with status $status: $(tail -3 "$err" | tr '\n' ' ')" | tee -a "$failures"
  fi
  python3 "$rows_py" "$label" "$report" "$failures" | tee -a "$table"
  rm -f "$report" "$err"
}

want() { [ -z "${PROBE_ONLY:-}" ] || [[ " $PROBE_ONLY " == *" $1 "* ]]; }

# The summary: printed at the end, or when the probe is stopped (SIGTERM, SIGINT).
summarize() {
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  echo
  echo "== pipeline statistics (VKATTN_PIPELINE_STATS=1)"
  if [ -s "$stats" ]; then sort -u "$stats"; else
    echo "none: the driver lacks VK_KHR_pipeline_executable_properties"; fi
  echo
  echo "== decode probes: time per op (us), K+V bytes / same-run copy rate, kernel and merge dispatch (us)"
  printf "%-34s %-52s %10s %8s %9s %9s %8s\n" case benchmark time_us kv/copy main_us merge_us big/small
  cat "$table"
  if [ -s "$out/smi$suffix.csv" ]; then
    echo
    echo "== SM clock during the run (MHz: min, max; nvidia-smi every 100 ms)"
    awk -F', ' 'NR > 1 { v = $2 + 0; if (min == "" || v < min) min = v; if (v > max) max = v } END { print min, max }' \
      "$out/smi$suffix.csv"
  fi
  # Errors (a tile the device refuses, a submit timeout) and cases cut or skipped by the
  # deadline are listed; wrong results and crashed processes fail the run.
  if [ -s "$failures" ]; then
    echo
    echo "== errors, failures, cases cut or skipped (each case's whole message)"
    cat "$failures"
  fi
  echo "gpu-probe: $((SECONDS - start)) s; files in $out"
}
# Stopped: the case in flight is stopped too (timeout passes the signal on), and what it
# finished goes into the table before the summary.
on_stop() {
  echo "gpu-probe: stopped"
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null
    wait "$child" 2>/dev/null
    child=""
    finish_case 143 "${cur[@]}"
  fi
  summarize
  rm -f "$rows_py"
  exit 124
}
trap on_stop TERM INT

decode_gpu="BM_decode/one/keys:($keys_re)/shape:2/"
decode_list="BM_decode/(ops8|cold)/keys:($keys_re)/shape:2/"
if want decode; then
iters=$iterations
echo "== D3 (first: the figures the targets name): a 32-layer decode step (256 and 4k slots, full), rope and kv_append fused and apart; the smallest dispatch"
run "step, fused" -- vkattn-bench-decode "BM_decode_step/capacity:(256|4096)/shape:2/fused:1"
run "step, ops apart" -- vkattn-bench-decode "BM_decode_step/capacity:(256|4096)/shape:2/fused:0"
run "copy 16 B" -- vkattn-bench-decode "BM_copy_16B"
echo "== capacity against occupancy (16k-slot cache holding 1k tokens / 1k-slot cache)"
run "cache, GPU kernels" -- vkattn-bench-decode "BM_decode_cache/held:1024/shape:2"
run "group kernel on GQA 4, d128" VKATTN_DECODE=kernel=group -- vkattn-bench-decode "$decode_gpu"
# Where the whole kernel's time goes past its loads' (the 2026-11-27 late run: 1.9x at 16k,
# 2.8x at 1k): the planned grid's loads alone, the whole kernel, then the whole kernel
# less the exchanges between a key group's lanes (the reduce-scatter's and all-gathers'
# shuffles each stage), less its end (the key groups' merge and the writes, the splits'
# merge), less only the splits' merge by the last workgroup (its atomics and second read),
# and less both the exchanges and the end (VKATTN_DECODE=skip: no valid result, not checked).
echo "== D4: where decode's time goes: loads, the whole kernel, and the kernel less each part"
run "loads, default: depth 2, 4 keys (64)" VKATTN_DECODE=load_only=1 -- vkattn-bench-decode "BM_decode/(one|ops8|cold)/keys:($keys_re)/shape:2/"
run "decode, default: depth 2, 4 keys" VKATTN_PIPELINE_STATS=1 -- vkattn-bench-decode "BM_decode/(one|ops8|cold)/keys:($keys_re)/shape:2/"
# The same with the baseline copy run once before the timed loop, not between iterations
# (bench_common.hpp, Baseline: its 32 MiB of writes left in L2 may slow the op after it).
run "decode, baseline copy before the loop" VKATTN_BENCH_BASELINE=blocks -- vkattn-bench-decode "BM_decode/(one|ops8)/keys:($keys_re)/shape:2/"
for s in exchange end merge exchange+end; do
  run "decode, skip $s" VKATTN_DECODE=skip=$s -- vkattn-bench-decode "BM_decode/(one|ops8)/keys:($keys_re)/shape:2/"
done
# A candidate against the exchanges: a row's maximum moved only when a score passes it by
# ln 2^16, so most stages skip the scores' all-gather (valid results, checked).
run "decode, max=lazy" VKATTN_DECODE=max=lazy -- vkattn-bench-decode "BM_decode/(one|ops8|cold)/keys:($keys_re)/shape:2/"
fi
if want grids; then
iters=$iterations
# Candidates for the decode grid's loads (docs/gpu.md, "Next run"): each row's label gives
# the bytes of K and V its plan keeps in flight per SM on an H100/H200 (two 128-invocation
# workgroups an SM, 16 KiB a stage of 32 keys (4 a key group, the default at head_dim 128;
# 8 KiB at 2), 'depth' stages each), per op of 8 in one list (ops8: K and V of 1k and 4k
# keys stay in L2 between ops) and DRAM-cold (cold: K and V of their own per op from a
# rotating set of 128 MiB or more).
echo "== D1: loads only, per op of 8 and DRAM-cold; KiB in flight per SM in the label (the default's in D4)"
run "loads, depth 1, S targeted (32)" VKATTN_DECODE=load_only=1,depth=1,divide=0 -- vkattn-bench-decode "$decode_list"
run "loads, depth 3 (96)" VKATTN_DECODE=load_only=1,depth=3 -- vkattn-bench-decode "$decode_list"
run "loads, 2 keys, the default before (32)" VKATTN_DECODE=load_only=1,keys=2 -- vkattn-bench-decode "$decode_list"
run "loads, resident=3 (96)" VKATTN_DECODE=load_only=1,resident=3 -- vkattn-bench-decode "$decode_list"
run "loads, resident=4 (128)" VKATTN_DECODE=load_only=1,resident=4 -- vkattn-bench-decode "$decode_list"
run "loads, depth 3, resident=3 (144)" VKATTN_DECODE=load_only=1,depth=3,resident=3 -- vkattn-bench-decode "$decode_list"
run "loads, runs of 4 stages (64)" VKATTN_DECODE=load_only=1,run=4 -- vkattn-bench-decode "$decode_list"
echo "== D2: the whole kernel on the same grids (pipeline statistics kept: registers <= 168 for 3 an SM; the default's in D4)"
run "decode, depth 1, S targeted" VKATTN_PIPELINE_STATS=1 VKATTN_DECODE=depth=1,divide=0 -- vkattn-bench-decode "$decode_list"
run "decode, depth 3" VKATTN_PIPELINE_STATS=1 VKATTN_DECODE=depth=3 -- vkattn-bench-decode "$decode_list"
run "decode, 2 keys, the default before" VKATTN_PIPELINE_STATS=1 VKATTN_DECODE=keys=2 -- vkattn-bench-decode "$decode_list"
run "decode, resident=3" VKATTN_DECODE=resident=3 -- vkattn-bench-decode "$decode_list"
run "decode, depth 3, resident=3" VKATTN_DECODE=depth=3,resident=3 -- vkattn-bench-decode "$decode_list"
run "decode, two-pass merge" VKATTN_DECODE=merge=two_pass -- vkattn-bench-decode "$decode_gpu"
# One split a KV head (8 workgroups each streaming every stage, no merge), lone dispatches:
# the whole kernel's time less its loads', over the stages, is the math's serial cost a
# stage (1k and 4k keys: 32 and 128 stages of 32 keys).
one_split="BM_decode/one/keys:(1024|4096)/shape:2/"
run "decode, one split a head" VKATTN_DECODE=keys_per_split=16384 -- vkattn-bench-decode "$one_split"
run "loads, one split a head" VKATTN_DECODE=load_only=1,keys_per_split=16384 -- vkattn-bench-decode "$one_split"
fi
if want mla; then
iters=$iterations
mla="BM_decode_mla/keys:(4096|16384)/shape:2"
echo "== absorbed MLA decode: 128 query heads over one latent KV head (K 576, V its first 512), 4k and 16k keys"
run "MLA, group kernel, f16" VKATTN_PIPELINE_STATS=1 -- vkattn-bench-decode "$mla/dtype:1/"
run "MLA, group kernel, q8_0" -- vkattn-bench-decode "$mla/dtype:3/"
run "MLA, one row per tile, f16" VKATTN_DECODE=kernel=decode -- vkattn-bench-decode "$mla/dtype:1/"
run "MLA, group, 16 lanes x 8 rows" VKATTN_PIPELINE_STATS=1 VKATTN_DECODE=lanes=16 -- vkattn-bench-decode "$mla/dtype:1/"
run "MLA, group, 4 keys a stage" VKATTN_DECODE=keys=4 -- vkattn-bench-decode "$mla/dtype:1/"
run "MLA, group, 4 resident" VKATTN_DECODE=resident=4 -- vkattn-bench-decode "$mla/dtype:1/"
# DeepSeek V3.2's sparse attention: 2048 of 16k or 64k keys a token, as an f32 mask
# (mask:0, every key read), with AttentionConfig::mask_keys (mask:1) or as a key list
# (mask:2; both the listed keys only); decode, and prefill of 8 tokens.
run "DSA, 2048 keys of 16k/64k: mask, promise, key list" -- vkattn-bench-decode "BM_(decode|prefill)_dsa/"
fi
if want prefill; then
iters=""  # cases of milliseconds: min_time's count is small
echo "== prefill: 512x512, 512x4k and 4kx4k causal (TFLOP/s): the tiled kernel and its tiles, the lane-per-key kernel, three stages"
prefill_re=${PROBE_PREFILL:-"tokens:512/keys:(512|4096)/|tokens:4096/keys:4096/"}
gpu_prefill="BM_attention_fused/vulkan_gpu_kernels_prefill/($prefill_re)"
run "prefill, tiled (planned)" VKATTN_PIPELINE_STATS=1 -- vkattn-bench-attention "$gpu_prefill"
run "tiled, shared-memory reduce" VKATTN_PREFILL=reduce=shared -- vkattn-bench-attention "$gpu_prefill"
run "tiled, no prefetch" VKATTN_PREFILL=prefetch=0 -- vkattn-bench-attention "$gpu_prefill"
for t in 32,16,2,2 32,16,2,1 32,8,2,1 64,8,4,1 16,16,1,2; do
  IFS=, read -r r k rp kp <<< "$t"
  run "tiled ${r}x${k}, ${rp}x${kp} each" VKATTN_PIPELINE_STATS=1 \
      VKATTN_PREFILL=rows=$r,keys=$k,rows_per_invocation=$rp,keys_per_invocation=$kp -- vkattn-bench-attention "$gpu_prefill"
done
run "prefill, lane-per-key (GPU shape)" VKATTN_PIPELINE_STATS=1 VKATTN_PREFILL=kernel=lane_per_key -- \
    vkattn-bench-attention "$gpu_prefill"
run "prefill, three stages" -- vkattn-bench-attention "BM_attention/vulkan_prefill/($prefill_re)"
run "prefill, f16 packed (tiled f16vec2)" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=off VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-attention "$gpu_prefill"
fi
if want matrix; then
iters=
# AttentionPrecision::f16_products (VKATTN_BENCH_PRECISION): the matrix kernel on the
# cooperative matrices (VKATTN_MATRIX=on; the f32 kernels where the build or device has
# none, which the pipeline statistics show) and as its stand-in, beside the exact tiled
# kernel in the same process order; then absorbed MLA decode the same two ways (the matrix
# kernel's dim split: 16 heads a workgroup over four subgroups, each a slice of the 576 / 512
# dims; its pipeline statistics show whether the slice's 9 A tiles and 8 accumulators spill).
prefill_re=${PROBE_PREFILL:-"tokens:512/keys:(512|4096)/|tokens:4096/keys:4096/"}
gpu_prefill="BM_attention_fused/vulkan_gpu_kernels_prefill/($prefill_re)"
mla="BM_decode_mla/keys:(${PROBE_MLA_KEYS:-4096|16384})/shape:2"
echo "== matrix: f16 products (TFLOP/s) against the exact tiled kernel; MLA decode 4k/16k"
run "exact, tiled (planned)" -- vkattn-bench-attention "$gpu_prefill"
run "f16, matrix (coopmat)" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=on VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-attention "$gpu_prefill"
run "f16, matrix stand-in" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=standin VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-attention "$gpu_prefill"
# Where the device has NV cooperative matrices 2, the row above ran attn_mt2 (the softmax
# in registers; the pipeline statistics name it): attn_mt on the same units (matrix_nv2=0),
# then attn_mt2's tiles (rows x keys; 64 x 32 planned) and its prefetch.
run "f16, matrix KHR (attn_mt)" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=on VKATTN_PREFILL=matrix_nv2=0 \
    VKATTN_BENCH_PRECISION=f16_products -- vkattn-bench-attention "$gpu_prefill"
for t in "matrix_rows=32,matrix_keys=64" "matrix_rows=64,matrix_keys=16" "matrix_rows=16,matrix_keys=64" \
         "matrix_prefetch=1"; do
  run "f16, matrix nv2, ${t//matrix_/}" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=on VKATTN_PREFILL="$t" \
      VKATTN_BENCH_PRECISION=f16_products -- vkattn-bench-attention "$gpu_prefill"
done
# attn_mt's variants (VKATTN_PREFILL's matrix_* knobs): queries held in registers,
# which lets the planned 64 x 32 tile fit 48 KiB (the 2026-11-27 run's 64 x 16 took 7.7
# TFLOP/s at 4kx4k), 32 x 32 and 16 x 64 tiles (rows x keys), and the next tile's K and V
# loaded into registers during a tile (prefetch), alone and with queries in registers;
# a tile's loads all issued before any is stored (stage=batch), alone and with queries in
# registers.
for t in "matrix_queries=registers" "matrix_rows=32,matrix_keys=32,matrix_queries=registers" \
         "matrix_rows=16,matrix_keys=64,matrix_queries=registers" "matrix_prefetch=1" \
         "matrix_queries=registers,matrix_prefetch=1" "matrix_stage=batch" \
         "matrix_queries=registers,matrix_stage=batch"; do
  run "f16, matrix, ${t//matrix_/}" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=on VKATTN_PREFILL="matrix_nv2=0,$t" \
      VKATTN_BENCH_PRECISION=f16_products -- vkattn-bench-attention "$gpu_prefill"
done
# Where the matrix kernel's time goes (VKATTN_PREFILL=matrix_skip, attn_mt.comp's MT_SKIP;
# no valid result, so not checked): the planned tile less its K and V loads, its scalar
# pass, its products, its marks after a split's first tile, then less all four (the tile
# loop's barriers and staging stores alone).
for s in loads scalar products marks loads+scalar+products+marks; do
  run "f16, matrix, skip $s" VKATTN_MATRIX=on VKATTN_PREFILL="matrix_skip=$s" \
      VKATTN_BENCH_PRECISION=f16_products -- vkattn-bench-attention "$gpu_prefill"
done
# No matrix path: the tiled kernel's packed f16 variant (f16vec2 FMAs; the f32 kernel where
# the device lacks shaderFloat16, which the pipeline statistics show).
run "f16, packed (tiled f16vec2)" VKATTN_PIPELINE_STATS=1 VKATTN_MATRIX=off VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-attention "$gpu_prefill"
run "MLA, exact (group), f16" VKATTN_BENCH_ITERATIONS=$iterations -- vkattn-bench-decode "$mla/dtype:1/"
run "MLA, f16, matrix (coopmat)" VKATTN_PIPELINE_STATS=1 VKATTN_BENCH_ITERATIONS=$iterations VKATTN_MATRIX=on VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-decode "$mla/dtype:1/"
run "MLA, f16, matrix stand-in" VKATTN_PIPELINE_STATS=1 VKATTN_BENCH_ITERATIONS=$iterations VKATTN_MATRIX=standin VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-decode "$mla/dtype:1/"
run "MLA, f16, matrix, prefetch" VKATTN_PIPELINE_STATS=1 VKATTN_BENCH_ITERATIONS=$iterations VKATTN_MATRIX=on VKATTN_PREFILL=matrix_prefetch=1 \
    VKATTN_BENCH_PRECISION=f16_products -- vkattn-bench-decode "$mla/dtype:1/"
run "MLA, f16, packed (group f16vec2)" VKATTN_PIPELINE_STATS=1 VKATTN_BENCH_ITERATIONS=$iterations VKATTN_MATRIX=off VKATTN_DECODE=packed=1 \
    VKATTN_BENCH_PRECISION=f16_products -- \
    vkattn-bench-decode "$mla/dtype:1/"
fi
if want paged; then
iters=$iterations
# vkattn-bench-paged: each case first checks the paged cache's attention against the ring's
# (a difference fails the probe). Decode of one sequence whose blocks are every other block
# of the pool, against a ring cache of the same keys, timed alternately (target: paged/ring
# within 1.1); a 4k-token fork against kv_copy_sequence's copy; and device memory of 64
# sequences of 100 to 8k tokens against a ring cache sized for 8k.
echo "== paged KV cache: decode and fork against a ring cache, memory of 64 sequences"
run "paged decode, GPU kernels" -- vkattn-bench-paged "BM_paged_decode/keys:($keys_re)/shape:2/"
run "paged fork of 4k tokens" -- vkattn-bench-paged "BM_paged_fork"
run "paged memory, 64 sequences" -- vkattn-bench-paged "BM_paged_memory"
fi
ggml_dir="$(dirname "$bin")/../.ggml"
if [ -f "$ggml_dir/run.sh" ] && want ggml; then
  ggml_limit=$case_timeout
  if [ -n "$deadline" ]; then ggml_limit=$((deadline - (SECONDS - start))); fi
  if [ "$ggml_limit" -lt "$min_left" ]; then
    echo "SKIPPED [ggml] (PROBE_DEADLINE=$deadline s reached)" | tee -a "$failures"
    skipped=$((skipped + 1))
  else
    echo
    echo "== ggml-vulkan FLASH_ATTN_EXT on the same device (test-backend-ops perf): decode"
    timeout -k 5 "$ggml_limit" bash "$ggml_dir/run.sh" 2>&1 | grep -E "RESULT|FLASH_ATTN_EXT|Vulkan0|error" | head -20
    # Its cooperative-matrix paths as they are (cm2 on NVIDIA), without cm2 (cm1), and
    # without either (scalar): the rows the matrix kernel is measured against.
    for ggml_env in "" "GGML_VK_DISABLE_COOPMAT2=1" "GGML_VK_DISABLE_COOPMAT=1 GGML_VK_DISABLE_COOPMAT2=1"; do
      ggml_limit=$case_timeout
      if [ -n "$deadline" ]; then ggml_limit=$((deadline - (SECONDS - start))); fi
      [ "$ggml_limit" -lt "$min_left" ] && break
      echo "== ggml-vulkan FLASH_ATTN_EXT: prefill, ${ggml_env:-default paths} (its mask is not causal: every key is computed)"
      timeout --foreground -k 5 "$ggml_limit" env $ggml_env \
        LD_LIBRARY_PATH="$(dirname "$bin")/lib:$ggml_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$ggml_dir/bin/test-backend-ops" perf -o FLASH_ATTN_EXT -b Vulkan0 \
        -p '^hsk=128,hsv=128,nh=8,nr23=\[4,1\],kv=(512|4096),nb=(512|4096),mask=1,sinks=0,.*type_K=f16,type_V=f16,permute=\[0,1,2,3\],' \
        2>&1 | grep -E "FLASH_ATTN_EXT|error" | head -20
    done
  fi
fi

summarize
trap - TERM INT
rm -f "$rows_py"
failed=$(grep -c '^FAIL ' "$failures")
[ "$skipped" -eq 0 ] || echo "gpu-probe: $skipped process(es) skipped at the deadline" >&2
if [ "$failed" -ne 0 ]; then
  echo "gpu-probe: $failed case(s) failed: wrong results or a crashed benchmark (above)" >&2
  exit 1
fi
