#!/bin/sh
# Instruction counts of the zkcron daemon per fire (docs/BENCHMARKS.md, "How to reproduce each").
# Usage: sh benches/callgrind_fires.sh BINARY NAME [SECONDS]
# Runs BINARY under callgrind (children not traced) with 10 every-second tasks running
# target/release/examples/probe for SECONDS (25), then prints the fires seen and callgrind's
# instruction total. Run it twice (e.g. 12 s and 25 s): per fire = Δ total / Δ fires.
# CALLGRIND_KEEP=FILE keeps callgrind's output there, for callgrind_annotate. CALLGRIND_CONFIG
# is the node config's text (default: empty), e.g. '[log]\noutput_limit = 0'.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$1; N=$2; D=$(mktemp -d); mkdir -p "$D/jobs"
trap 'rm -rf "$D"' EXIT
for i in 0 1 2 3 4 5 6 7 8 9; do
  printf 'schedule = "* * * * * *"\ncommand = ["%s/target/release/examples/probe", "%s/out"]\ncatch_up = "skip"\n' "$ROOT" "$D" > "$D/jobs/p$i.toml"
done
printf "${CALLGRIND_CONFIG:-}\n" > "$D/c.toml"
valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" "$B" run --config "$D/c.toml" \
  --jobs-dir "$D/jobs" --state-dir "$D/st" --node-id bench 2>"$D/log.txt" &
P=$!; sleep "${3:-25}"; kill -TERM $P; wait $P || true
if [ -n "$CALLGRIND_KEEP" ]; then cp "$D/cg.out" "$CALLGRIND_KEEP"; fi
echo "$N fires $(wc -l < "$D/out") $(grep -m1 -o 'totals: [0-9]*' "$D/cg.out")"
