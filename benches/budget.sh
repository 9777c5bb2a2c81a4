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
# The same with --threads 2 gives the busiest thread's figure: what bounds
# the speed-up of two threads (one engine's figure over it).
#
# Fails when either figure exceeds its budget in benches/budget.txt (the
# figure it was set from, plus 2 %). A change that raises the budget says why in its
# commit. CALLIPER_SKIP=budget skips this on purpose.
#
# usage: benches/budget.sh            measure and check
#        benches/budget.sh --set      measure and write the new budget
# env:   CALLIPER=PATH                the binary to measure (default: build
#                                     target/release/calliper)
set -euo pipefail
cd "$(dirname "$0")/.."
skip=$(printf '%s' "${CALLIPER_SKIP:-}" | tr -d '[:space:]')
case ",$skip," in *,budget,*) echo "budget: skipped (CALLIPER_SKIP=budget)"; exit 0 ;; esac
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

# count SECONDS: generates a capture of that length and analyses it under
# callgrind, once with one thread and once with two (--separate-threads:
# one count per thread). Writes "packets" and each run's counts (run in a
# background subshell: a failure exits it with its message, and the wait
# below fails the script).
count() {
    local file=$out/g729-$1s.pcap
    "$CALLIPER" generate --calls 200000 --concurrent 5000 --warm-start --duration "$1" \
        --codecs g729:1 --loss 0.5 --seed 5 -o "$file" 2>"$out/gen.$1" || {
        echo "budget: generating the ${1} s capture failed:" >&2
        cat "$out/gen.$1" >&2
        exit 1
    }
    local threads
    for threads in 1 2; do
        valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg.$1.t$threads" \
            "$CALLIPER" analyze --threads "$threads" --progress never --format jsonl \
            -o /dev/null "$file" 2>"$out/log.$1.t$threads" || {
            echo "budget: analysing the ${1} s capture with $threads thread(s) under callgrind failed:" >&2
            cat "$out/log.$1.t$threads" >&2
            exit 1
        }
    done
    local packets
    # The summary's counters: "counters  bytes N, calls N, packets N, ...";
    # the field named exactly "packets" (not "rule ignored packets").
    packets=$(sed -n 's/^counters *//p' "$out/log.$1.t1" | tr ',' '\n' | awk '$1 == "packets" && NF == 2 {print $2}')
    if [ -z "$packets" ]; then
        echo "budget: no packet count for the ${1} s capture:" >&2
        cat "$out/log.$1.t1" >&2
        exit 1
    fi
    rm -f "$file"
    echo "$packets" >"$out/packets.$1"
}
# fail MESSAGE: the check cannot be made.
fail() {
    echo "budget: $1" >&2
    exit 1
}
# number VALUE WHAT: VALUE, or a failure when it is not a whole number.
number() {
    case $1 in
    '' | *[!0-9-]*) fail "no count for $2 (callgrind's output unreadable?)" ;;
    esac
    echo "$1"
}
# The instructions of thread K (01 the main thread) of a run.
ir() {
    local f=$out/cg.$1.t$2-$3
    [ -f "$f" ] || fail "no callgrind output $f"
    number "$(awk '/^summary:/ {print $2}' "$f")" "$f"
}
# The two captures run side by side (callgrind runs one thread at a time);
# each writes its own files and reports its own failure.
count 2 &
two=$!
count 4 &
four=$!
wait "$two" || { kill "$four" 2>/dev/null; wait "$four" 2>/dev/null; exit 1; }
wait "$four" || exit 1
p2=$(number "$(cat "$out/packets.2")" "the 2 s capture's packets")
p4=$(number "$(cat "$out/packets.4")" "the 4 s capture's packets")
per_packet() { awk -v a="$1" -v b="$2" -v p="$p2" -v q="$p4" 'BEGIN { printf "%.0f", (b - a) / (q - p) }'; }
a=$(ir 2 1 01)
b=$(ir 4 1 01)
figure=$(per_packet "$a" "$b")
# With two threads: the busiest thread's figure, what bounds the speed-up
# (the main thread and both shards, each in both runs).
busiest=0
for k in 01 02 03; do
    a=$(ir 2 2 "$k")
    b=$(ir 4 2 "$k")
    n=$(per_packet "$a" "$b")
    if [ "$n" -gt "$busiest" ]; then busiest=$n; fi
done
[ "$figure" -gt 0 ] && [ "$busiest" -gt 0 ] || fail "figures of $figure and $busiest instructions make no sense"
echo "budget: 2 s capture $p2 packets, 4 s capture $p4 packets"
echo "budget: $figure instructions per RTP packet in steady state"
echo "budget: with two threads, $busiest in the busiest thread" \
    "(bounds the speed-up at $(awk -v a="$figure" -v b="$busiest" 'BEGIN { printf "%.2f", a / b }')x)"
if [ "${1:-}" = --set ]; then
    limit=$(awk -v f="$figure" 'BEGIN { printf "%.0f", f * 1.02 }')
    limit2=$(awk -v f="$busiest" 'BEGIN { printf "%.0f", f * 1.02 }')
    printf '%s\n' "# Instructions per RTP packet allowed (benches/budget.sh), each the figure measured on $(date -u +%F) plus 2 %:" \
        "# one thread (measured $figure), then the busiest of two threads (measured $busiest)." \
        "$limit" "$limit2" >"$budget_file"
    echo "budget: wrote $limit and $limit2 to $budget_file"
    exit 0
fi
limit=$(grep -v '^#' "$budget_file" | sed -n 1p)
limit2=$(grep -v '^#' "$budget_file" | sed -n 2p)
if [ -z "$limit" ] || [ -z "$limit2" ]; then
    echo "budget: $budget_file needs two budgets (one thread, then the busiest of two); write them with --set" >&2
    exit 1
fi
if [ "$figure" -gt "$limit" ]; then
    echo "budget: $figure exceeds the budget of $limit instructions per RTP packet ($budget_file)." >&2
    echo "budget: find the cost with callgrind_annotate (build with --profile profiling for source lines), or raise the budget with --set and say why in the commit." >&2
    exit 1
fi
if [ "$busiest" -gt "$limit2" ]; then
    echo "budget: with two threads, $busiest in the busiest thread exceeds its budget of $limit2 ($budget_file)." >&2
    echo "budget: find the cost with callgrind_annotate on each thread's file, or raise the budget with --set and say why in the commit." >&2
    exit 1
fi
echo "budget: within the budgets of $limit and $limit2"
