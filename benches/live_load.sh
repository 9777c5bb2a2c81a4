#!/usr/bin/env bash
# Live load: tcpreplay pushes a G.729 capture through a veth pair between two
# network namespaces this script creates, at a series of packet rates; on the
# far end `calliper probe` (1 and 2 threads) or tcpdump, each with the same
# ring size, captures it. Per rate and capturer: packets sent, packets the
# kernel dropped, CPU seconds of the capturer. The highest rate with zero
# drops is the figure for BENCHMARKS.md. Needs root (namespaces) and
# tcpreplay (`apt-get install tcpreplay`).
#
# usage: benches/live_load.sh [PCAP] [RATES...]
#   PCAP   default bench-out/g729-short.pcap (benches/g729_50k.sh makes it)
#   RATES  packets per second; "top" for --topspeed (default 100000 200000 400000 top)
set -euo pipefail
cd "$(dirname "$0")/.."
pcap=${1:-bench-out/g729-short.pcap}; shift || true
rates=("$@"); [ ${#rates[@]} -gt 0 ] || rates=(100000 200000 400000 top)
command -v tcpreplay >/dev/null || { echo "tcpreplay is missing: apt-get install tcpreplay"; exit 1; }
cargo build --release -q
bin=$PWD/target/release/calliper
ring_mib=64   # calliper: 64 blocks of 1 MiB; tcpdump: -B 65536 (KiB)
G=load-g-$$ P=load-p-$$
out=$(mktemp -d)
cleanup() { ip netns pids "$P" 2>/dev/null | xargs -r kill 2>/dev/null || true; ip netns del "$G" 2>/dev/null || true; ip netns del "$P" 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT
ip netns add "$G"; ip netns add "$P"
ip link add g0 netns "$G" type veth peer name p0 netns "$P"
ip -n "$G" link set g0 up; ip -n "$P" link set p0 up
# Only the first N packets: a run at a low rate must not take minutes.
count=${COUNT:-1000000}
cat "$pcap" > /dev/null
cpu() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }   # utime + stime, s
run() { # run NAME RATE CMD... ; prints "name rate sent dropped cpu"
    local name=$1 rate=$2; shift 2
    ip netns exec "$P" "$@" > "$out/$name.out" 2> "$out/$name.err" &
    local pid=$!
    sleep 1.5
    local speed=(--pps="$rate"); [ "$rate" = top ] && speed=(--topspeed)
    local sent pps
    ip netns exec "$G" tcpreplay -q -i g0 --limit="$count" "${speed[@]}" "$pcap" > "$out/replay" 2>&1
    sent=$(awk '/Actual:/ {print $2}' "$out/replay")
    pps=$(grep -o '[0-9.]* pps' "$out/replay" | head -1 | cut -d' ' -f1)
    sleep 1.5
    local c; c=$(cpu $pid)
    kill -TERM $pid; wait $pid || true
    local dropped
    case $name in
        tcpdump*) dropped=$(awk '/dropped by kernel/ {print $1}' "$out/$name.err") ;;
        *) dropped=$(grep -o 'event=stopped.*kernel_dropped=[0-9]*' "$out/$name.err" | grep -o '[0-9]*$') ;;
    esac
    echo "$name $rate sent=$sent achieved_pps=$pps kernel_dropped=${dropped:-?} cpu_s=$c"
}
for rate in "${rates[@]}"; do
    run calliper-1 "$rate" "$bin" probe -i p0 --format jsonl -o /dev/null --status-every 0 --block-count $ring_mib
    run calliper-2 "$rate" "$bin" probe -i p0 --threads 2 --format jsonl -o /dev/null --status-every 0 --block-count $ring_mib
    run tcpdump "$rate" tcpdump -i p0 -B $((ring_mib * 1024)) -s 0 -w /dev/null
done
