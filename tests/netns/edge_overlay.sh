#!/usr/bin/env bash
# Two Calliper edge nodes joined by an overlay link that loses packets,
# each steered by its own Kamailio over rtpengine's ng protocol:
#
#   caller 10.90.1.2 ── 10.90.1.1 [Kamailio A + edge A]      (namespace P)
#                                   │ overlay, LOSS % each way (emulated)
#                                 [Kamailio B + edge B] 10.90.2.1 ── 10.90.2.2 callee
#
# Kamailio A offers the caller's SDP to edge A, which names its own address;
# Kamailio B offers that to edge B, which names its own to the callee. Each
# edge sees the other's address as a party's and carries that party's media
# over the overlay (node to node, recovered hop by hop) instead of UDP.
# Writes to OUT:
#   callee.pcap, caller.pcap   the proxy's two interfaces (what the parties
#                              sent and received)
#   node-a.json, node-b.json   each node's counters (relay run --stats)
#
# usage: tests/netns/edge_overlay.sh OUT [CALLS] [LOSS]   (CALLIPER names the binary)
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
calls=${2:-2}
loss=${3:-5}
: "${CALLIPER:?CALLIPER must name the calliper binary}"
A=cal-ea-$$ B=cal-eb-$$ P=cal-ep-$$
. "$here/topology.sh"
. "$here/edge.sh"
ipa "$P" ip addr add 127.0.0.2/8 dev lo 2>/dev/null || true

# The overlay link is keyed: every datagram on it authenticated.
head -c 32 /dev/urandom >"$out/link.key"
node() { # id listen peer-id peer-listen ng address ports peer-address
    cat <<TOML
id = $1
listen = "$2"
[[neighbours]]
id = $3
addr = "$4"
loss_pct = $loss
key_file = "$out/link.key"
TOML
    edge_table "$5" "$6" "$7" "$3" "$8"
}
node 1 127.0.0.1:7001 2 127.0.0.1:7002 127.0.0.1:2223 10.90.1.1 40000-40499 10.90.2.1 >"$out/node-a.toml"
node 2 127.0.0.1:7002 1 127.0.0.1:7001 127.0.0.1:2224 10.90.2.1 40500-40999 10.90.1.1 >"$out/node-b.toml"
for n in a b; do
    ip netns exec "$P" "$CALLIPER" relay run "$out/node-$n.toml" --stats "$out/node-$n.json" >"$out/node-$n.log" 2>&1 &
    eval "node_$n=\$!"
    pids+=($!)
done
sleep 0.5
for n in A B; do
    ipa "$P" kamailio -f "$here/kamailio-edge.cfg" -A "EDGE_$n" -DD -E -P "$out/kamailio-$n.pid" \
        >"$out/kamailio-$n.log" 2>&1 &
    pids+=($!)
done
for i in pa pb; do
    ipa "$P" tcpdump -i $i -U -s 0 -w "$out/$i.pcap" 2>"$out/tcpdump-$i.log" &
    pids+=($!)
done
sleep 1.5
sipp_calls "$calls" "$out"/node-*.log "$out"/kamailio-*.log
sleep 1
# The nodes write their counters when stopped.
kill -INT "$node_a" "$node_b"
wait "$node_a" "$node_b" || { echo "a node failed:"; tail -5 "$out"/node-*.log; exit 1; }
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 0.5
mv "$out/pa.pcap" "$out/caller.pcap"
mv "$out/pb.pcap" "$out/callee.pcap"
echo "netns: $calls calls across two edges captured to $out"
