#!/usr/bin/env bash
# The packet path's instruction budget: steady-state instructions per RTP
# packet, counted by callgrind (deterministic, unlike time on this noisy VM).
#
# Two captures from one seed differ only in length (2 s and 4 s of G.729,
# 5 000 concurrent calls from the first second, 0.5 % loss), so
# (I(4 s) - I(2 s)) / (P(4 s) - P(2 s)) leaves out start-up, call set-up and
# the final records: what remains is what one more RTP packet costs with every
# feature on (intervals, three jitter buffers, KPIs, alerts, traffic tables).
#
# Fails when the figure exceeds the budget in benches/budget.txt (the figure
# it was set from, plus 2 %). A change that raises the budget says why in its
# commit. CALLIPER_SKIP=budget skips this on purpose.
#
# usage: benches/budget.sh            measure and check
#        benches/budget.sh --set      measure and write the new budget
# env:   CALLIPER=PATH                the binary to measure (default: build
#                                     target/release/calliper)
set -euo pipefail
cd "$(dirname "$0")/.."
skip=${CALLIPER_SKIP:-}
case ",${skip// /}," in *,budget,*) echo "budget: skipped (CALLIPER_SKIP=budget)"; exit 0 ;; esac
command -v valgrind >/dev/null || {
    echo "budget: valgrind is needed (apt-get install valgrind; scripts/test.sh installs it)," \
        "or set CALLIPER_SKIP=budget to skip this on purpose" >&2
    exit 1
}
budget_file=benches/budget.txt
if [ -z "${CALLIPER:-}" ]; then
    cargo build --release -q -p calliper
    CALLIPER=target/release/calliper
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/calliper-budget.XXXXXX")
trap 'rm -rf "$out"' EXIT

# count SECONDS: writes "instructions packets" for a capture of that length
# (run in a background subshell: a failure exits it with its message, and
# the wait below fails the script).
count() {
    local file=$out/g729-$1s.pcap
    "$CALLIPER" generate --calls 200000 --concurrent 5000 --warm-start --duration "$1" \
        --codecs g729:1 --loss 0.5 --seed 5 -o "$file" 2>"$out/gen.$1" || {
        echo "budget: generating the ${1} s capture failed:" >&2
        cat "$out/gen.$1" >&2
        exit 1
    }
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" \
        "$CALLIPER" analyze --progress never --format jsonl -o /dev/null "$file" \
        2>"$out/log.$1" || {
        echo "budget: analysing the ${1} s capture under callgrind failed:" >&2
        cat "$out/log.$1" >&2
        exit 1
    }
    local ir packets
    ir=$(awk '/^summary:/ {print $2}' "$out/cg.$1")
    # The summary's counters: "counters  bytes N, calls N, packets N, ...";
    # the field named exactly "packets" (not "rule ignored packets").
    packets=$(sed -n 's/^counters *//p' "$out/log.$1" | tr ',' '\n' | awk '$1 == "packets" && NF == 2 {print $2}')
    if [ -z "$ir" ] || [ -z "$packets" ]; then
        echo "budget: no instruction count or packet count for the ${1} s capture:" >&2
        cat "$out/log.$1" >&2
        exit 1
    fi
    rm -f "$file"
    echo "$ir $packets" >"$out/count.$1"
}
# The two counts run side by side (callgrind is single-threaded); each
# writes its own files and reports its own failure.
count 2 &
two=$!
count 4 &
four=$!
wait "$two" || { kill "$four" 2>/dev/null; wait "$four" 2>/dev/null; exit 1; }
wait "$four" || exit 1
read -r ir2 p2 <"$out/count.2"
read -r ir4 p4 <"$out/count.4"
figure=$(awk -v a="$ir2" -v b="$ir4" -v p="$p2" -v q="$p4" 'BEGIN { printf "%.0f", (b - a) / (q - p) }')
echo "budget: 2 s capture $p2 packets, $ir2 instructions; 4 s capture $p4 packets, $ir4 instructions"
echo "budget: $figure instructions per RTP packet in steady state"
if [ "${1:-}" = --set ]; then
    limit=$(awk -v f="$figure" 'BEGIN { printf "%.0f", f * 1.02 }')
    printf '%s\n' "# Instructions per RTP packet allowed (benches/budget.sh): measured $figure on $(date -u +%F), plus 2 %." \
        "$limit" >"$budget_file"
    echo "budget: wrote $limit to $budget_file"
    exit 0
fi
limit=$(grep -v '^#' "$budget_file" | head -1)
if [ "$figure" -gt "$limit" ]; then
    echo "budget: $figure exceeds the budget of $limit instructions per RTP packet ($budget_file)." >&2
    echo "budget: find the cost with callgrind_annotate, or raise the budget with --set and say why in the commit." >&2
    exit 1
fi
echo "budget: within the budget of $limit"
