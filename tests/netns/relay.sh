#!/usr/bin/env bash
# Three relay nodes in three network namespaces, a triangle of veth links:
#
#        r2
#   5 ms / \ 5 ms      (5 % emulated loss each way on both)
#       /   \
#     r1 --- r3         30 ms, no loss
#
# Streams go r1 -> r3 (expected latency picks r1-r2-r3 and recovers the
# loss hop by hop); at 4 s the r2-r3 veth is taken down and traffic must move
# to the direct link after dead-link detection. Writes to OUT:
#   recv-N.json   each receiver's report     r*.json   each node's counters
#
# usage: tests/netns/relay.sh OUT CALLIPER_BINARY [STREAMS]
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
bin=$2
streams=${3:-4}
R1=cal-r1-$$ R2=cal-r2-$$ R3=cal-r3-$$
here=$(cd "$(dirname "$0")" && pwd)
. "$here/namespaces.sh"
namespaces "$R1" "$R2" "$R3"
link "$R1" v12 10.91.12.1/24 "$R2" v21 10.91.12.2/24
link "$R2" v23 10.91.23.2/24 "$R3" v32 10.91.23.3/24
link "$R1" v13 10.91.13.1/24 "$R3" v31 10.91.13.3/24

cat >"$out/r1.toml" <<T
id = 1
listen = "0.0.0.0:7000"
[[neighbours]]
id = 2
addr = "10.91.12.2:7000"
loss_pct = 5
delay_ms = 5
[[neighbours]]
id = 3
addr = "10.91.13.3:7000"
delay_ms = 30
T
cat >"$out/r2.toml" <<T
id = 2
listen = "0.0.0.0:7000"
[[neighbours]]
id = 1
addr = "10.91.12.1:7000"
loss_pct = 5
delay_ms = 5
[[neighbours]]
id = 3
addr = "10.91.23.3:7000"
loss_pct = 5
delay_ms = 5
T
cat >"$out/r3.toml" <<T
id = 3
listen = "0.0.0.0:7000"
[[neighbours]]
id = 2
addr = "10.91.23.2:7000"
loss_pct = 5
delay_ms = 5
[[neighbours]]
id = 1
addr = "10.91.13.1:7000"
delay_ms = 30
T
run_for=16
for i in 1 2 3; do
    n=R$i
    ipa "${!n}" "$bin" relay run "$out/r$i.toml" --duration $run_for --stats "$out/r$i.json" --seed $i \
        2>"$out/r$i.log" &
    pids+=($!)
done
sleep 2 # hellos, RTTs and link state settle
for s in $(seq 1 "$streams"); do
    ipa "$R3" "$bin" relay recv --node 127.0.0.1:7000 --vport $((5000 + s)) --count 500 --idle 4 \
        >"$out/recv-$s.json" 2>"$out/recv-$s.log" &
    pids+=($!)
done
sleep 0.3
for s in $(seq 1 "$streams"); do
    ipa "$R1" "$bin" relay send --node 127.0.0.1:7000 --dest 3 --vport $((5000 + s)) --count 500 \
        --interval-ms 20 2>"$out/send-$s.log" &
    pids+=($!)
done
sleep 4
ipa "$R2" ip link set v23 down  # kill the r2-r3 link
# A stranger: r1's address but not the node's port is no neighbour of r2.
ipa "$R1" python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('10.91.12.1', 0)); s.sendto(b'\xca\x11junk', ('10.91.12.2', 7000))"
wait
echo "relay netns: $streams streams done, reports in $out"
