#!/usr/bin/env bash
# Whole-run benchmark: calliper analyze vs tshark -z rtp,streams on one synthetic capture,
# in the same run. Usage: benches/whole_run.sh [CALLS] [CONCURRENT] [HOLD_MEAN_S]
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-4000}; concurrent=${2:-2000}; hold=${3:-30}
out=bench-out; mkdir -p $out
cargo build --release -q
bin=target/release/calliper
$bin generate --calls "$calls" --concurrent "$concurrent" --hold-mean "$hold" --hold-shape 19 \
    --codecs pcmu:30,pcma:20,g729:40,g722:10 --loss 1 --seed 1 -o $out/bench.pcap --truth $out/truth.jsonl
packets=$(tshark -r $out/bench.pcap -q -z io,stat,0 2>/dev/null | awk '/<>/ {print $6}')
cat $out/bench.pcap > /dev/null   # into the page cache
size=$(stat -c %s $out/bench.pcap)
echo "capture: $packets packets, $size bytes"
/usr/bin/time -f "%e %U %M" -o $out/calliper.time $bin analyze --progress never --format jsonl -o $out/calliper.jsonl $out/bench.pcap 2>/dev/null || true
/usr/bin/time -f "%e %U %M" -o $out/tshark.time tshark -n -r $out/bench.pcap -q -z rtp,streams > $out/tshark.txt 2>/dev/null
read ce cu cm < $out/calliper.time
read te tu tm < $out/tshark.time
awk -v p="$packets" -v ce="$ce" -v cu="$cu" -v cm="$cm" -v te="$te" -v tu="$tu" -v tm="$tm" 'BEGIN {
  printf "calliper: %.2f s wall, %.2f s user, %.0f pkt/s/core, %.0f ns/pkt, peak RSS %d KiB\n", ce, cu, p/cu, cu*1e9/p, cm
  printf "tshark:   %.2f s wall, %.2f s user, %.0f pkt/s/core, %.0f ns/pkt, peak RSS %d KiB\n", te, tu, p/tu, tu*1e9/p, tm
  printf "ratio (tshark CPU / calliper CPU): %.1fx\n", tu/cu }'
