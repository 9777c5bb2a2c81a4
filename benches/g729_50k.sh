#!/usr/bin/env bash
# Line-rate benchmark: G.729 (20 ms, 74-byte frames), 50 000 concurrent calls from
# the first second (--warm-start). Two captures from one seed: LONG seconds for
# calliper alone (throughput, memory per call) and SHORT seconds for calliper
# and tshark -z rtp,streams in the same run (the ratio). Each file is read once
# into the page cache first. Per-core figures use user CPU time.
# usage: benches/g729_50k.sh [LONG_S] [SHORT_S]
set -euo pipefail
cd "$(dirname "$0")/.."
long=${1:-13}; short=${2:-3}
out=bench-out; mkdir -p $out
cargo build --release -q
bin=target/release/calliper
gen() { [ -f "$2" ] || $bin generate --calls 200000 --concurrent 50000 --warm-start --duration "$1" \
    --codecs g729:1 --loss 0.5 --seed 5 -o "$2"; }
gen "$long" $out/g729-long.pcap
gen "$short" $out/g729-short.pcap
count() { capinfos -c -M "$1" | awk '/Number of packets/ {print $NF}'; }
measure() { # measure NAME FILE CMD...
    local name=$1 file=$2; shift 2
    cat "$file" > /dev/null
    /usr/bin/time -f "%e %U %M" -o $out/$name.time "$@" > /dev/null 2>&1 || true
    read e u m < $out/$name.time
    echo "$e $u $m"
}
pl=$(count $out/g729-long.pcap); ps=$(count $out/g729-short.pcap)
read le lu lm < <(measure cal-long $out/g729-long.pcap $bin analyze --progress never --format jsonl -o /dev/null $out/g729-long.pcap)
read se su sm < <(measure cal-short $out/g729-short.pcap $bin analyze --progress never --format jsonl -o /dev/null $out/g729-short.pcap)
read te tu tm < <(measure tshark-short $out/g729-short.pcap tshark -n -r $out/g729-short.pcap -q -z rtp,streams)
awk -v pl="$pl" -v le="$le" -v lu="$lu" -v lm="$lm" -v ps="$ps" -v se="$se" -v su="$su" -v sm="$sm" -v te="$te" -v tu="$tu" -v tm="$tm" 'BEGIN {
  printf "long  (%d packets): calliper %.2f s user, %.2f M pkt/s per core, %.0f ns/pkt, peak RSS %.0f MiB = %.0f bytes per concurrent call\n", pl, lu, pl/lu/1e6, lu*1e9/pl, lm/1024, lm*1024/50000
  printf "short (%d packets): calliper %.2f s user (%.0f ns/pkt); tshark %.2f s user (%.0f ns/pkt), peak RSS %.0f MiB\n", ps, su, su*1e9/ps, tu, tu*1e9/ps, tm/1024
  printf "ratio (tshark CPU / calliper CPU, same file, same run): %.1fx\n", tu/su }'
