#!/usr/bin/env bash
# Straggler bench (docs/search.md "Mixed and slow devices", docs/runtime.md "Stragglers"): 4 CPU
# ranks train a small GPT with rank 1 slowed 2x from the start (`weft train --slow 1:2`, which makes
# its forward and backward passes take twice as long), once on the plan `weft plan` finds when it
# ignores the straggler and once on the plan it finds with `--straggler 1:2`; both against one
# process on the same model, seed and global batch.
#
# Second case: the uniform plan for ADAPT_STEPS (60) steps with rank 1 slowed 2x from step
# ADAPT_FROM (10), once as it is and once under `weft train --adapt` (which re-plans the shares with
# the measured speeds and switches in place); its throughput after the switch is compared with the
# aware plan's, its total time with the uniform run's.
#
# Third case: a 4-stage pipeline of the same model with 8 layers (dp 1, so no shares to move; each
# stage starts with 2 layers) for ADAPT_STEPS steps with rank 1
# slowed 2x from ADAPT_FROM, as it is and under --adapt (which re-cuts the stages and moves the
# layers' state between the ranks in place); prints the line
#   pipeline: adapt/uniform Z.ZZx (stages a:b:c:d)
#
# Prints per run the plan, tokens/s and the largest loss difference from one process, and ends with
# the line
#   straggler: aware/uniform X.XXx, adapt/uniform Y.YYx, parity ok|FAILED
# (adapt/uniform: the uniform run's total time over the --adapt run's, both slowed from ADAPT_FROM;
# parity: every run's losses within TOL of one process's at every step).
#
# The planner sees the CPU ranks through the cluster file written below: a "GPU" whose peak is a CPU
# rank's order of magnitude. Only the ratio of the ranks' speeds decides where the work goes, and
# that ratio comes from --straggler, not from the file's figures.
#
# Usage: bench/hetero/straggler_bench.sh
#        (BUILD=build STEPS=12 ADAPT_STEPS=60 ADAPT_FROM=10 OUT=/tmp/weft-straggler)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$root/build}
WEFT=$(cd "$BUILD/bin" && pwd)/weft
OUT=${OUT:-/tmp/weft-straggler}
STEPS=${STEPS:-12}
SEQ=${SEQ:-128}
BATCH=${BATCH:-16}
MODEL=$root/bench/profiler/bench-gpt.json
TOL=${TOL:-1e-5}
ADAPT_STEPS=${ADAPT_STEPS:-60}
ADAPT_FROM=${ADAPT_FROM:-10}

for tool in "$WEFT" jq; do
  command -v "$tool" >/dev/null || { echo "straggler_bench: missing $tool" >&2; exit 2; }
done
mkdir -p "$OUT"
say() { echo "straggler_bench: $*" >&2; }

cat >"$OUT/cpu4.json" <<'JSON'
{
  "name": "cpu4",
  "nodes": 1,
  "gpus_per_node": 4,
  "gpu": { "name": "cpu-rank", "tflops": { "fp32": 0.05 }, "memory_gib": 4, "hbm_gbps": 10 },
  "intra_node": { "gbps": 1.0, "latency_us": 50 }
}
JSON

common=(--model "$MODEL" --cluster "$OUT/cpu4.json" --seq "$SEQ" --global-batch "$BATCH" --dtype fp32)
"$WEFT" plan "${common[@]}" --out "$OUT/uniform.json" --format json >"$OUT/uniform.search.json"
"$WEFT" plan "${common[@]}" --straggler 1:2 --out "$OUT/aware.json" --format json >"$OUT/aware.search.json"
"$WEFT" estimate "${common[@]}" --gpus 1 --tp 1 --pp 1 --micro-batch "$BATCH" --out "$OUT/one.json" \
  --format json >/dev/null
jq '.name = "bench-gpt-8" | .groups[0].count = 8' "$MODEL" >"$OUT/gpt8.json"
pipe_common=(--model "$OUT/gpt8.json" --cluster "$OUT/cpu4.json" --seq "$SEQ" --global-batch "$BATCH" --dtype fp32)
"$WEFT" estimate "${pipe_common[@]}" --gpus 4 --tp 1 --pp 4 --micro-batch 2 --out "$OUT/pipe.json" \
  --format json >/dev/null
"$WEFT" estimate "${pipe_common[@]}" --gpus 1 --tp 1 --pp 1 --micro-batch "$BATCH" --out "$OUT/one8.json" \
  --format json >/dev/null

describe() {  # the plan's structure in one line
  jq -r '"pp\(.train.pp) m\(.train.micro_batches) \(.stages[0].layers[0] | "tp\(.tp) dp\(.dp) zero\(.zero)")" +
         (if .train.dp_shares then " shares " + (.train.dp_shares | map(tostring) | join(":")) else " even shares" end)' "$1"
}
say "uniform plan: $(describe "$OUT/uniform.json")"
say "aware plan:   $(describe "$OUT/aware.json") (predicted $(jq -r '.baselines.uniform_s / .step_time_s | . * 100 | round / 100' "$OUT/aware.search.json")x over the uniform plan on these devices)"

train() {  # NAME PLAN NPROC STEPS EXTRA...
  local name=$1 plan=$2 n=$3 steps=$4
  shift 4
  local t0 t1
  t0=$(date +%s.%N)
  "$WEFT" launch -n "$n" --no-prefix -- "$WEFT" train --plan "$plan" --steps "$steps" --seed 7 --threads 1 \
    --format json "$@" >"$OUT/$name.log" 2>"$OUT/$name.err" || { say "$name failed:"; cat "$OUT/$name.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' >"$OUT/$name.wall"
  grep '^{' "$OUT/$name.log" | jq -c 'select(.step) | .loss' >"$OUT/$name.losses"
  grep '^{' "$OUT/$name.log" | jq -r 'select(.summary) | .mean_tokens_per_s' >"$OUT/$name.tps"
}
say "case 1: one process, then 4 ranks with rank 1 slowed 2x on each plan ($STEPS steps each)"
train one "$OUT/one.json" 1 "$STEPS"
train uniform "$OUT/uniform.json" 4 "$STEPS" --slow 1:2
train aware "$OUT/aware.json" 4 "$STEPS" --slow 1:2
say "case 2: $ADAPT_STEPS steps, rank 1 slowed 2x from step $ADAPT_FROM: one process, the uniform plan, --adapt"
train one-long "$OUT/one.json" 1 "$ADAPT_STEPS"
train stay "$OUT/uniform.json" 4 "$ADAPT_STEPS" --slow "1:2:$ADAPT_FROM"
train adapt "$OUT/uniform.json" 4 "$ADAPT_STEPS" --slow "1:2:$ADAPT_FROM" --adapt
say "case 3: the same on a 4-stage pipeline of 8 layers: one process, the pipeline as it is, --adapt"
train one8-long "$OUT/one8.json" 1 "$ADAPT_STEPS"
train pipe-stay "$OUT/pipe.json" 4 "$ADAPT_STEPS" --slow "1:2:$ADAPT_FROM"
train pipe-adapt "$OUT/pipe.json" 4 "$ADAPT_STEPS" --slow "1:2:$ADAPT_FROM" --adapt

maxdiff() {  # REF RUN: largest |loss - the reference's loss| over the steps
  paste "$OUT/$1.losses" "$OUT/$2.losses" | awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.3g", m + 0}'
}
parity=ok
check() {  # REF RUN LABEL TOKENS/S
  local d
  d=$(maxdiff "$1" "$2")
  [[ $(wc -l <"$OUT/$2.losses") -eq $(wc -l <"$OUT/$1.losses") ]] || d=inf
  awk -v d="$d" -v t="$TOL" 'BEGIN {exit !(d != "inf" && d + 0 <= t + 0)}' || parity=FAILED
  printf '%-8s %-44s %10.0f tokens/s   max |loss - one process| %s\n' "$2" "$3" "$4" "$d"
}
check one uniform "$(describe "$OUT/uniform.json")" "$(cat "$OUT/uniform.tps")"
check one aware "$(describe "$OUT/aware.json")" "$(cat "$OUT/aware.tps")"
check one-long stay "uniform plan, slowed from step $ADAPT_FROM" "$(cat "$OUT/stay.tps")"
check one-long adapt "--adapt, slowed from step $ADAPT_FROM" "$(cat "$OUT/adapt.tps")"
check one8-long pipe-stay "pipeline, slowed from step $ADAPT_FROM" "$(cat "$OUT/pipe-stay.tps")"
check one8-long pipe-adapt "pipeline --adapt, slowed from step $ADAPT_FROM" "$(cat "$OUT/pipe-adapt.tps")"

# The --adapt run: its switches, and its throughput from the step after the first switch on.
grep '^{' "$OUT/adapt.log" | jq -c 'select(.switched) | {step, change: .switched.change}' >"$OUT/adapt.switches"
grep -h 'weft: adapt' "$OUT/adapt.log" "$OUT/adapt.err" >&2 || true
switch=$(head -1 "$OUT/adapt.switches" | jq -r '.step // empty')
tokens=$(jq -r '.train.global_batch * .train.seq' "$OUT/uniform.json")
if [[ -n $switch ]]; then
  after=$(grep '^{' "$OUT/adapt.log" | jq -s --argjson s "$switch" --argjson t "$tokens" \
    '[.[] | select(.step and .step > $s + 1)] | ($t * length) / (map(.step_time_s) | add)')
  within=$(awk -v a="$after" -v w="$(cat "$OUT/aware.tps")" 'BEGIN {printf "%.0f", 100 * (a - w) / w}')
  say "--adapt switched after step $switch: $(printf '%.0f' "$after") tokens/s from then on, ${within}% against the aware plan's"
else
  say "--adapt did not switch"
fi
say "total time: uniform plan $(cat "$OUT/stay.wall") s, --adapt $(cat "$OUT/adapt.wall") s"
grep -h 'weft: adapt' "$OUT/pipe-adapt.log" "$OUT/pipe-adapt.err" >&2 || true
cut=$(grep '^{' "$OUT/pipe-adapt.log" | jq -r 'select(.switched) | .switched.change' | head -1 | sed -n 's/^stages \([0-9:]*\) layers.*/\1/p')
say "total time: pipeline $(cat "$OUT/pipe-stay.wall") s, --adapt $(cat "$OUT/pipe-adapt.wall") s"
pipe=$(awk -v a="$(cat "$OUT/pipe-adapt.wall")" -v u="$(cat "$OUT/pipe-stay.wall")" 'BEGIN {printf "%.2f", u / a}')
echo "pipeline: adapt/uniform ${pipe}x (stages ${cut:-not re-cut})"
aware=$(awk -v a="$(cat "$OUT/aware.tps")" -v u="$(cat "$OUT/uniform.tps")" 'BEGIN {printf "%.2f", a / u}')
adapt=$(awk -v a="$(cat "$OUT/adapt.wall")" -v u="$(cat "$OUT/stay.wall")" 'BEGIN {printf "%.2f", u / a}')
echo "straggler: aware/uniform ${aware}x, adapt/uniform ${adapt}x, parity $parity"
