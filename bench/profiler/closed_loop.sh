#!/usr/bin/env bash
# The closed loop: profile this machine (2 and 4 local ranks) and two small models, cost several
# plans with the measured profiles (weft estimate / weft plan), train each with `weft train`, and
# compare predicted with measured step time and peak memory per rank.
#
# Two sets of cases, reported apart:
#   fit       the GPT-2-style model (bench-gpt.json) at sequence 128: the cases the calibrated
#             model's rules were developed against (docs/profiles.md);
#   held-out  cases fixed before any of them was run and never used to change the model: another
#             architecture (bench-llama.json: RMSNorm, RoPE, SwiGLU, grouped-query attention,
#             6 layers, untied head), another shape (sequence 256, 8 samples per step) and
#             strategies the fit set lacks (Ulysses, ZeRO-2, GPipe, full recompute under ZeRO-2,
#             pp x tp, tp x dp with ZeRO-1, selective recompute under tp).
#
#   bench/profiler/closed_loop.sh              # everything; about 15 minutes on 2 cores
#   WORLDS=4 STEPS=20 SETS=held-out bench/profiler/closed_loop.sh
#
# Environment: BUILD (a build with -DWEFT_WITH_TORCH=ON, e.g. scripts/setup's; default build), OUT (work folder,
# default /tmp/weft-closed-loop), WORLDS ("2 4"), STEPS (16 optimizer steps per run; the runtime's
# mean leaves out the first), SEQ (128), BATCH (16 samples per step) for the fit set, HSEQ (256) and
# HBATCH (8) for the held-out set, SETS ("fit held-out"), REUSE=1 (keep profiles found in OUT). Measured memory is the peak resident set size (RSS) of each rank's process, from
# /usr/bin/time; predicted memory is the cost model's peak per device.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$root/build}
WEFT=$(cd "$BUILD/bin" && pwd)/weft
PREDICT=$(cd "$BUILD/bin" && pwd)/weft_profile_predict
OUT=${OUT:-/tmp/weft-closed-loop}
WORLDS=${WORLDS:-"2 4"}
STEPS=${STEPS:-16}
SEQ=${SEQ:-128}
BATCH=${BATCH:-16}
REUSE=${REUSE:-0}
HSEQ=${HSEQ:-256}
HBATCH=${HBATCH:-8}
SETS=${SETS:-"fit held-out"}
MODEL=$here/bench-gpt.json
HMODEL=$here/bench-llama.json

for tool in "$WEFT" "$PREDICT" /usr/bin/time jq; do
  command -v "$tool" >/dev/null || { echo "closed_loop: missing $tool" >&2; exit 2; }
done
mkdir -p "$OUT/plans" "$OUT/runs"
say() { echo "closed_loop: $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# Other processes on the machine distort both the profiles and the runs (on 2 cores one busy
# compiler halves a rank's speed). Before each measurement wait (up to QUIET_WAIT seconds) until
# the machine is idle: CPU use over 2 s (from /proc/stat) below QUIET percent of all cores.
QUIET=${QUIET:-15}
QUIET_WAIT=${QUIET_WAIT:-300}
cpu_ticks() {  # prints "busy total" jiffies since boot; builtins only
  local cpu user nice sys idle iowait irq softirq steal rest
  read -r cpu user nice sys idle iowait irq softirq steal rest </proc/stat
  echo "$((user + nice + sys + irq + softirq + steal)) $((user + nice + sys + idle + iowait + irq + softirq + steal))"
}
busy() {
  local b0 t0 b1 t1
  read -r b0 t0 <<<"$(cpu_ticks)"
  sleep 2
  read -r b1 t1 <<<"$(cpu_ticks)"
  (((b1 - b0) * 100 >= QUIET * (t1 - t0)))
}
quiet() {
  local waited=0
  while busy && ((waited < QUIET_WAIT)); do
    sleep 3
    waited=$((waited + 5))
  done
  ((waited == 0)) || say "waited ${waited}s for an idle machine"
}
say "machine: $(nproc) cores, load average $(load)"

# --- 1. profiles -------------------------------------------------------------------------------
if [[ " $SETS " == *" fit "* && ( $REUSE != 1 || ! -f $OUT/layers.json ) ]]; then
  say "profiling the model's layers"
  quiet
  "$WEFT" profile model --model "$MODEL" --tp 1,2,4 --seq 64,128 --micro-batch 1,2,4,8,16 \
    --out "$OUT/layers.json" --progress off
fi
if [[ " $SETS " == *" held-out "* && ( $REUSE != 1 || ! -f $OUT/layers-llama.json ) ]]; then
  say "profiling the held-out model's layers"
  quiet
  "$WEFT" profile model --model "$HMODEL" --tp 1,2,4 --seq 128,256 --micro-batch 1,2,4,8 \
    --out "$OUT/layers-llama.json" --progress off
fi
for n in $WORLDS; do
  if [[ $REUSE != 1 || ! -f $OUT/hw$n.json ]]; then
    say "profiling the hardware with $n ranks"
    quiet
    "$WEFT" launch -n "$n" -- weft profile hardware --out "$OUT/hw$n.json" --cluster-out "$OUT/cluster$n.json" \
      --progress off
  fi
done
if [[ " $WORLDS " == *" 4 "* && ( $REUSE != 1 || ! -f $OUT/hw4-2nodes.json ) ]]; then
  say "profiling 4 ranks as 2 virtual nodes of 2 (tables for groups spanning nodes)"
  quiet
  "$WEFT" launch -n 4 -- weft profile hardware --gpus-per-node 2 --out "$OUT/hw4-2nodes.json" --progress off
fi

# --- 2. plans ----------------------------------------------------------------------------------
# The set being written: its name, model, layer profile, sequence and batch (use_set fit|held-out).
use_set() {
  SET=$1
  if [[ $SET == fit ]]; then CM=$MODEL CL=$OUT/layers.json CS=$SEQ CB=$BATCH; else
    CM=$HMODEL CL=$OUT/layers-llama.json CS=$HSEQ CB=$HBATCH; fi
}
# uniform NAME WORLD TP PP ESTIMATE-FLAGS...: a uniform plan costed with the measured profiles.
uniform() {
  local name=$1 n=$2 tp=$3 pp=$4
  shift 4
  "$WEFT" estimate --model "$CM" --cluster "$OUT/cluster$n.json" --seq "$CS" --global-batch "$CB" \
    --tp "$tp" --pp "$pp" \
    --dtype fp32 --hardware-profile "$OUT/hw$n.json" --model-profile "$CL" "$@" \
    --out "$OUT/plans/$name.json" --format json >/dev/null
  echo "$name $n $SET $CL" >>"$OUT/cases"
}
# layerwise NAME WORLD BASE JQ-FILTER: BASE's plan with layers changed by the filter, re-costed.
layerwise() {
  local name=$1 n=$2 base=$3 filter=$4
  jq "$filter" "$OUT/plans/$base.json" >"$OUT/plans/$name.raw.json"
  "$WEFT" estimate --plan "$OUT/plans/$name.raw.json" --hardware-profile "$OUT/hw$n.json" \
    --model-profile "$CL" --out "$OUT/plans/$name.json" --format json >/dev/null
  echo "$name $n $SET $CL" >>"$OUT/cases"
}
# planner NAME WORLD: weft plan's best plan for the measured machine, searched in fp32 (the dtype
# the CPU runtime trains in).
planner() {
  local name=$1 n=$2
  if "$WEFT" plan --model "$CM" --hardware-profile "$OUT/hw$n.json" --model-profile "$CL" \
    --seq "$CS" --global-batch "$CB" --dtype fp32 --out "$OUT/plans/$name.json" --format json \
    >"$OUT/plans/$name.search.json"; then
    echo "$name $n $SET $CL" >>"$OUT/cases"
  else
    say "weft plan failed for $n ranks; no planner case"
  fi
}

rm -f "$OUT/cases"
use_set fit
for n in $WORLDS; do
  [[ " $SETS " == *" fit "* ]] || break
  h=$((BATCH / n))
  uniform "w$n-dp$n" "$n" 1 1 --micro-batch "$h"
  uniform "w$n-dp$n-zero1-m2" "$n" 1 1 --micro-batch $((h / 2)) --zero 1
  uniform "w$n-dp$n-zero3" "$n" 1 1 --micro-batch "$h" --zero 3
  uniform "w$n-dp$n-recompute-full" "$n" 1 1 --micro-batch "$h" --recompute full
  uniform "w$n-dp$n-recompute-sel" "$n" 1 1 --micro-batch "$h" --recompute selective
  uniform "w$n-tp$n-sp" "$n" "$n" 1 --sequence-parallel --micro-batch "$BATCH"
  uniform "w$n-pp2-m4" "$n" 1 2 --micro-batch $((BATCH * 2 / n / 4))
  if ((n == 4)); then
    uniform "w4-tp2-dp2" 4 2 1 --micro-batch $((BATCH / 2))
    # layer-wise: the first two layers tp2 x dp2, the last two dp4 with ZeRO-1
    layerwise "w4-layerwise" 4 "w4-tp2-dp2" \
      '.stages[0].layers |= [.[0], .[1], (.[2] | .tp = 1 | .sp = false | .dp = 4 | .zero = 1), (.[3] | .tp = 1 | .sp = false | .dp = 4 | .zero = 1)]'
  else
    uniform "w2-tp2" 2 2 1 --micro-batch "$BATCH"
  fi
  planner "w$n-planner" "$n"
done
# The held-out cases (fixed before any was run; see the top of this file).
use_set held-out
for n in $WORLDS; do
  [[ " $SETS " == *" held-out "* ]] || break
  if ((n == 2)); then
    uniform "h2-dp2-zero2" 2 1 1 --micro-batch 4 --zero 2
    uniform "h2-ulysses2" 2 1 1 --ulysses 2 --micro-batch 8
    uniform "h2-pp2-gpipe-m4" 2 1 2 --schedule gpipe --micro-batch 2
    uniform "h2-tp2-sp-sel" 2 2 1 --sequence-parallel --recompute selective --micro-batch 8
  else
    uniform "h4-dp4-zero2-full" 4 1 1 --zero 2 --recompute full --micro-batch 2
    uniform "h4-ulysses2-dp2" 4 1 1 --ulysses 2 --micro-batch 4
    uniform "h4-tp2-sp-dp2-zero1" 4 2 1 --sequence-parallel --zero 1 --micro-batch 4
    uniform "h4-pp2-tp2-m4" 4 2 2 --micro-batch 2
  fi
  planner "h$n-planner" "$n"
done

# --- 3. runs -----------------------------------------------------------------------------------
while read -r name n set layers; do
  quiet
  say "training $name on $n ranks ($STEPS steps; load $(load))"
  "$WEFT" launch -n "$n" -- /usr/bin/time -f "weft-maxrss-kb %M" "$WEFT" train --plan "$OUT/plans/$name.json" \
    --steps "$STEPS" --format json --progress off >"$OUT/runs/$name.log" 2>&1 ||
    say "$name failed: $(tail -n 3 "$OUT/runs/$name.log")"
  "$PREDICT" "$OUT/plans/$name.json" "$OUT/hw$n.json" "$layers" >"$OUT/runs/$name.predict.json"
done <"$OUT/cases"

# --- 4. report ---------------------------------------------------------------------------------
printf '\n%-26s %-8s %5s %10s %10s %10s %8s   %-22s %-30s\n' case set ranks "pred s" "median s" "mean s" error \
  "pred MiB/rank (stage)" "meas peak RSS MiB/rank"
sum=0
count=0
worst=0
best_name=""
best_time=""
for_report=$(mktemp)
while read -r name n set layers; do
  log=$OUT/runs/$name.log
  pred=$(jq '.predicted.step_time_s' "$OUT/plans/$name.json")
  # The median of steps 2..N (the runtime's own mean is in the log's summary line): one slow step
  # when another process wakes up on the 2 shared cores does not move it.
  meas=$(grep -h '"step_time_s"' "$log" | grep -v '"summary"' | sed 's/^\[[0-9]*\] //' | jq -s \
    'map(select(.step > 1) | .step_time_s) | sort | if length == 0 then null
     else (if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end) end' \
    2>/dev/null || true)
  mean=$(grep -h '"summary"' "$log" | sed 's/^\[[0-9]*\] //' | jq '.mean_step_time_s' 2>/dev/null || true)
  pp=$(jq '.train.pp' "$OUT/plans/$name.json")
  pmem=$(jq -r '[.stages[].predicted.memory_gib * 1024 | round | tostring] | join("/")' "$OUT/plans/$name.json")
  rss=$(grep -h 'weft-maxrss-kb' "$log" | sed 's/^\[\([0-9]*\)\] weft-maxrss-kb /\1 /' | sort -n |
    awk '{printf "%s%d", (NR > 1 ? "/" : ""), $2 / 1024}')
  if [[ -z $meas || $meas == null ]]; then
    printf '%-26s %-8s %5s %10.4f %10s %10s %8s   %-22s %-30s\n' "$name" "$set" "$n" "$pred" failed - - "$pmem" "$rss"
    continue
  fi
  err=$(awk -v p="$pred" -v m="$meas" 'BEGIN { printf "%.1f", (p - m) / m * 100 }')
  printf '%-26s %-8s %5s %10.4f %10.4f %10.4f %7s%%   %-22s %-30s\n' "$name" "$set" "$n" "$pred" "$meas" "$mean" "$err" "$pmem" "$rss"
  echo "$name $n $pred $meas $err $set" >>"$for_report"
done <"$OUT/cases"
echo
for set in $SETS; do
  awk -v set="$set" '$6 == set { a = $5 < 0 ? -$5 : $5; s += a; if (a > w) w = a; n++ } END {
    if (n) printf "%s: step time mean |error| %.1f %% over %d cases, worst %.1f %% (targets: mean <= 10 %%, each <= 20 %%)\n", set, s / n, n, w }' \
    "$for_report"
done
for set in $SETS; do for n in $WORLDS; do
  awk -v n="$n" -v set="$set" '$2 == n && $6 == set { if (best == "" || $4 < bt) { best = $1; bt = $4 } if ($1 ~ /planner$/) { pn = $1; pt = $4 }
                           if (pbest == "" || $3 < pbt) { pbest = $1; pbt = $3 } }
    END {
      if (pn == "") { printf "%s, %s ranks: no planner case\n", set, n; exit }
      if (pn == best || pt <= bt) printf "%s, %s ranks: the planner'"'"'s plan was the fastest measured (%.4f s)\n", set, n, pt
      else printf "%s, %s ranks: the planner'"'"'s plan took %.4f s, the fastest measured (%s) %.4f s: missed by %.1f %%\n", set, n, pt, best, bt, (pt - bt) / bt * 100
      printf "%s, %s ranks: lowest prediction among the cases: %s\n", set, n, pbest
    }' "$for_report"
done; done
echo
echo "analytic fall-backs per case (weft_profile_predict):"
while read -r name n set layers; do
  jq -r --arg c "$name" '"  \($c): source \(.source); " + (if (.fallbacks | length) == 0 then "none" else (.fallbacks | join("; ")) end)' \
    "$OUT/runs/$name.predict.json"
done <"$OUT/cases"
say "load average at the end: $(load); files in $OUT"
rm -f "$for_report"
