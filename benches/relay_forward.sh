#!/usr/bin/env bash
# Relay forwarding cost through real nodes in network namespaces:
#   s (node 1) -- m (node 2) -- r (node 3), no emulated loss or delay.
#
# 1. Latency added by one node: tcpdump in m's namespace timestamps each data
#    packet as it arrives on m's veth from s and as it leaves on m's veth to r
#    (same clock, nanoseconds); the difference is everything the node adds:
#    kernel receive, wake-up, protocol, kernel send. One 50 packet/s stream,
#    with the node sleeping between packets (default) and with --busy-poll.
# 2. CPU per forwarded packet at m under saturation: SENDERS clients push
#    COUNT packets each as fast as they can; user+system time of node 2
#    divided by the packets it forwarded. Kernel drops at every node's socket
#    are reported (the nodes read them with SO_MEMINFO).
#
# usage: benches/relay_forward.sh [COUNT] [SENDERS]   (run as root)
#        KEYED=1 benches/relay_forward.sh ...   with every link keyed (MAC)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-200000}
senders=${2:-3}
# PIN=1: node 2 alone on the last CPU, everything else on the others (how a
# busy-polling relay is deployed: a core of its own).
middle= others=
if [ "${PIN:-0}" = 1 ]; then
  last=$(( $(nproc) - 1 )); middle="taskset -c $last"; others="taskset -c 0-$(( last > 0 ? last - 1 : 0 ))"
fi
cargo build --release -q
bin=$PWD/target/release/calliper
out=$(mktemp -d)
S=bench-s-$$ M=bench-m-$$ R=bench-r-$$
cleanup() { for n in $S $M $R; do ip netns del $n 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT
for n in $S $M $R; do ip netns add $n; ip netns exec $n ip link set lo up; done
veth() { ip link add $2 netns $1 type veth peer name $5 netns $4
  ip netns exec $1 ip addr add $3/24 dev $2; ip netns exec $4 ip addr add $6/24 dev $5
  ip netns exec $1 ip link set $2 up; ip netns exec $4 ip link set $5 up; }
veth $S sm 10.92.1.1 $M ms 10.92.1.2
veth $M mr 10.92.2.2 $R rm 10.92.2.3
# KEYED=1: every link authenticated (one key file for all, for the bench).
[ "${KEYED:-0}" = 1 ] && head -c 32 /dev/urandom > $out/link.key
node() { # node ID NEIGHBOUR_ID ADDR [NEIGHBOUR_ID ADDR]
  echo "id = $1"; echo 'listen = "0.0.0.0:7000"'
  shift; while [ $# -gt 0 ]; do echo "[[neighbours]]"; echo "id = $1"; echo "addr = \"$2\""
    [ "${KEYED:-0}" = 1 ] && echo "key_file = \"$out/link.key\""; shift 2; done; }
node 1 2 10.92.1.2:7000 > $out/1.toml
node 2 1 10.92.1.1:7000 3 10.92.2.3:7000 > $out/2.toml
node 3 2 10.92.2.2:7000 > $out/3.toml

run() { # run NAME STREAMS PACKETS INTERVAL_MS [MIDDLE FLAGS...]
  local name=$1 streams=$2 n=$3 interval=$4; shift 4
  local dur=$(awk -v n=$n -v i=$interval 'BEGIN{print int(n*i/1000) + 8}')
  ip netns exec $S $others $bin relay run $out/1.toml --duration $dur --stats $out/$name.1.json & local p1=$!
  ip netns exec $M /usr/bin/time -f "%U %S" -o $out/$name.time $middle $bin relay run $out/2.toml --duration $dur --stats $out/$name.2.json "$@" & local p2=$!
  ip netns exec $R $others $bin relay run $out/3.toml --duration $dur --stats $out/$name.3.json & local p3=$!
  local cap=
  if [ $streams = 1 ]; then
    ip netns exec $M $others tcpdump -q -i any -n --time-stamp-precision=nano -B 16384 -w $out/$name.pcap udp port 7000 2>/dev/null & cap=$!
  fi
  sleep 2
  local recv=()
  for i in $(seq 1 $streams); do
    ip netns exec $R $others $bin relay recv --node 127.0.0.1:7000 --vport $((10 + i)) --count $n --idle 3 > $out/$name.recv$i.json & recv+=($!)
  done
  sleep 0.2
  for i in $(seq 1 $streams); do
    ip netns exec $S $others $bin relay send --node 127.0.0.1:7000 --dest 3 --vport $((10 + i)) --count $n --interval-ms $interval --size 160 &
  done
  wait "${recv[@]}" || true
  [ -n "$cap" ] && kill $cap
  wait $p1 $p2 $p3 2>/dev/null || true
}

latency() { # latency NAME: per-packet time through node 2, from its capture
  python3 - $out/$1.pcap <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
assert struct.unpack('<I', b[:4])[0] == 0xa1b23c4d, 'expected a nanosecond pcap'
link = struct.unpack('<I', b[20:24])[0]
l2 = {113: 16, 276: 20}[link]
at, arrive, leave = 24, {}, {}
while at + 16 <= len(b):
    s, ns, cap, _ = struct.unpack('<IIII', b[at:at + 16]); at += 16
    p = b[at:at + cap]; at += cap
    ip = p[l2:]
    if len(ip) < 28 or ip[0] >> 4 != 4: continue
    udp = ip[(ip[0] & 15) * 4:]
    d = udp[8:]
    if len(d) < 24 or d[:3] != b'\xca\x11\x01': continue
    key = d[8:10] + d[20:24]          # origin, msg_seq
    t = s * 10**9 + ns
    (arrive if ip[16:20] == bytes([10, 92, 1, 2]) else leave if ip[12:16] == bytes([10, 92, 2, 2]) else {})[key] = t
d = sorted((leave[k] - arrive[k]) / 1000 for k in arrive if k in leave)
q = lambda f: d[min(len(d) - 1, int(f * len(d)))]
print(f"{len(d)} packets through node 2: p50 {q(.5):.1f} us, p90 {q(.9):.1f} us, p99 {q(.99):.1f} us, min {d[0]:.1f} us")
PY
}

run idle 1 1000 20
echo "latency, node sleeping between packets: $(latency idle)"
run busy 1 1000 20 --busy-poll
echo "latency, node busy-polling:             $(latency busy)"

run load $senders $count 0
read u s < $out/load.time
python3 - $out $senders "$u" "$s" <<'PY'
import json, sys
out, senders, u, s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
node = {i: json.load(open(f"{out}/load.{i}.json")) for i in (1, 2, 3)}
recv = [json.load(open(f"{out}/load.recv{i}.json")) for i in range(1, senders + 1)]
fwd = node[2]['protocol']['forwarded']
delivered = sum(r['delivered'] for r in recv)
print(f"forwarding: {fwd} packets forwarded by node 2 from {senders} senders ({delivered} delivered); "
      f"{u + s:.2f} s CPU (user {u:.2f} + system {s:.2f}): {1e6 * (u + s) / max(fwd, 1):.2f} us CPU per forwarded packet, "
      f"{fwd / max(u + s, 1e-9):.0f} packets/s per core")
print("kernel drops at the sockets of nodes 1, 2, 3: " + ", ".join(str(node[i]['socket']['kernel_drops']) for i in (1, 2, 3)))
PY
