#!/usr/bin/env bash
# What a second thread buys on this machine, against what a second core
# can give at all: the peer is calliper itself, two independent processes
# on the same file at once (nothing shared between them but the machine).
#
# Each round, alternated: one process alone (t1), two processes at once
# (the pair's wall time), and one process with --threads 2 (t2).
#   ceiling  = 2 * t1 / pair  (what two cores give two unshared jobs)
#   achieved = t1 / t2        (what --threads 2 gives one job)
# On a machine with two real cores the ceiling is near 2; a virtual
# machine whose two vCPUs share a physical core, or a busy host, shows
# less, and no threading design can beat its ceiling there.
#
# usage: benches/two_cores.sh [ROUNDS]     (default 3)
# env:   CALLIPER=PATH   the binary (default: build target/release/calliper)
#        SECONDS_OF_CAPTURE=N   length of the generated G.729 capture (default 6)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
if [ -z "${CALLIPER:-}" ]; then
    cargo build --release -q -p calliper
    CALLIPER=target/release/calliper
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/calliper-two-cores.XXXXXX")
trap 'rm -rf "$out"' EXIT
file=$out/g729.pcap
"$CALLIPER" generate --calls 200000 --concurrent 50000 --warm-start \
    --duration "${SECONDS_OF_CAPTURE:-6}" --codecs g729:1 --loss 0.5 --seed 5 -o "$file"
run() { "$CALLIPER" analyze --progress never --format jsonl -o /dev/null "$@" "$file" 2>/dev/null; }
# wall SECONDS of a command, to the millisecond
wall() {
    local start end
    start=$(date +%s.%N)
    "$@"
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
pair() { run & run; wait; }
cat "$file" >/dev/null
echo "round  one(s)  pair(s)  threads2(s)  ceiling  achieved"
for r in $(seq "$rounds"); do
    t1=$(wall run --threads 1)
    tp=$(wall pair)
    t2=$(wall run --threads 2)
    awk -v r="$r" -v a="$t1" -v p="$tp" -v b="$t2" \
        'BEGIN { printf "%5d  %6.2f  %7.2f  %11.2f  %6.2fx  %7.2fx\n", r, a, p, b, 2 * a / p, a / b }'
done
