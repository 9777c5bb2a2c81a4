#!/usr/bin/env bash
# Relay forwarding cost through real nodes in network namespaces:
#   s (node 1) -- m (node 2) -- r (node 3), no emulated loss or delay.
# 1. CPU per forwarded packet at the middle node, with COUNT packets sent
#    as fast as the sender's client can (user+system time of node 2 divided
#    by the packets it forwarded).
# 2. Latency added by one node: median one-way delay of a 50 packet/s stream
#    s -> r through m, minus the same over a direct s -- r link.
# usage: benches/relay_forward.sh [COUNT]   (run as root)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-200000}
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
veth $S sr 10.92.3.1 $R rs 10.92.3.3
node() { # node FILE ID NEIGHBOUR_ID ADDR [NEIGHBOUR_ID ADDR]
  { echo "id = $2"; echo 'listen = "0.0.0.0:7000"'
    shift 2; while [ $# -gt 0 ]; do echo "[[neighbours]]"; echo "id = $1"; echo "addr = \"$2\""; shift 2; done; } ; }
run() { # run CONFIGS... then measure; $1 = via middle (yes/no)
  local via=$1 rate=$2 n=$3
  if [ $via = yes ]; then
    node x 1 2 10.92.1.2:7000 > $out/1.toml; node x 2 1 10.92.1.1:7000 3 10.92.2.3:7000 > $out/2.toml; node x 3 2 10.92.2.2:7000 > $out/3.toml
  else
    node x 1 3 10.92.3.3:7000 > $out/1.toml; node x 3 1 10.92.3.1:7000 > $out/3.toml
  fi
  local dur=$(( n / rate + 6 ))
  ip netns exec $S $bin relay run $out/1.toml --duration $dur --stats $out/1.json & p1=$!
  [ $via = yes ] && { ip netns exec $M /usr/bin/time -f "%U %S" -o $out/2.time $bin relay run $out/2.toml --duration $dur --stats $out/2.json & p2=$!; }
  ip netns exec $R $bin relay run $out/3.toml --duration $dur --stats $out/3.json & p3=$!
  sleep 2
  ip netns exec $R $bin relay recv --node 127.0.0.1:7000 --vport 9 --count $n --idle 3 > $out/recv.json &
  pr=$!
  sleep 0.2
  ip netns exec $S $bin relay send --node 127.0.0.1:7000 --dest 3 --vport 9 --count $n --interval-ms $(awk -v r=$rate 'BEGIN{print 1000/r}') --size 160
  wait $pr || true
  wait $p1 $p3 ${p2:-} 2>/dev/null || true
  unset p2
}
run yes 50 500; via=$(python3 -c "import json;print(json.load(open('$out/recv.json'))['delay_ms']['p50'])")
run no 50 500; direct=$(python3 -c "import json;print(json.load(open('$out/recv.json'))['delay_ms']['p50'])")
run yes 1000000 $count
read u s < $out/2.time
fwd=$(python3 -c "import json;print(json.load(open('$out/2.json'))['protocol']['forwarded'])")
delivered=$(python3 -c "import json;print(json.load(open('$out/recv.json'))['delivered'])")
python3 - "$via" "$direct" "$u" "$s" "$fwd" "$count" "$delivered" <<'PY'
import sys
via, direct, u, s, fwd, count, delivered = map(float, sys.argv[1:])
print(f"latency: p50 one-way {via:.3f} ms through the middle node, {direct:.3f} ms direct: {1000*(via-direct):.1f} us added per node")
print(f"forwarding: {int(fwd)} packets forwarded by the middle node ({int(delivered)} of {int(count)} delivered); "
      f"{u+s:.2f} s CPU (user {u:.2f} + system {s:.2f}): {1e6*(u+s)/max(fwd,1):.2f} us CPU per forwarded packet, "
      f"{fwd/max(u+s,1e-9):.0f} packets/s per core")
PY
