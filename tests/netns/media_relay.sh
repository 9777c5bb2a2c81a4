#!/usr/bin/env bash
# Three network namespaces joined by veth pairs, the media relayed:
#
#   caller 10.90.1.2 ── 10.90.1.1 proxy 10.90.2.1 ── 10.90.2.2 callee
#   (SIPp, UDP)        (Kamailio + rtpengine)         (SIPp, TCP)
#
# Each call's media has two legs (caller ⇄ rtpengine ⇄ callee); rtpengine
# relays RTP unchanged (same SSRC and sequence numbers). nftables drops RTP
# at three points, each counted per stream in its own set:
#   relay_to_callee  the proxy's output to the callee   (leg B, caller → callee)
#   callee_to_relay  the callee's device, to the proxy  (leg B, callee → caller)
#   relay_to_caller  the proxy's output to the caller   (leg A, callee → caller)
# and none on the caller's output (leg A, caller → callee). The proxy's two
# interfaces are captured (both directions; received packets before the
# proxy's own drops, sent ones after). Writes to OUT:
#   relay.pcap   the proxy's capture
#   drops.json   the three sets' counters (the ground truth)
#
# usage: tests/netns/media_relay.sh OUT [CALLS]
#   RELAY=calliper  relay with Calliper's edge node (`calliper relay run`
#                   with [edge]: the ng protocol Kamailio's rtpengine module
#                   speaks) instead of rtpengine; CALLIPER names the binary.
#                   Its counters go to OUT/edge-stats.json.
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
calls=${2:-2}
relay=${RELAY:-rtpengine}
A=cal-ma-$$ B=cal-mb-$$ P=cal-mp-$$
. "$here/topology.sh"

# RTP only (second byte below 200: not RTCP). SIPp replays g711a.pcap, whose
# first and last sequence numbers are 5 and 0 mod 8: drops take a random
# half of those that are 3 (or 4) mod 8, so every drop is a visible gap and
# the two drop points of one direction never take the same packet.
drop_set() {
    cat <<NFT
    set $1 {
        type ipv4_addr . inet_service . ipv4_addr . inet_service
        flags dynamic
        counter
    }
NFT
}
drop_rule() { # set, match, residue
    echo "        $2 @th,72,8 < 200 @th,80,16 & 7 == $3 numgen random mod 2 == 0 update @$1 { ip saddr . udp sport . ip daddr . udp dport } counter drop"
}
ipa "$P" nft -f - <<NFT
table inet lossy {
$(drop_set relay_to_callee)
$(drop_set relay_to_caller)
    chain output {
        type filter hook output priority 0; policy accept;
$(drop_rule relay_to_callee "ip daddr 10.90.2.2 udp dport 20000-29999" 3)
$(drop_rule relay_to_caller "ip daddr 10.90.1.2 udp dport 30000-39999" 4)
    }
}
NFT
# At the callee's device, not in its output chain: a drop there would fail
# SIPp's send, and SIPp stops playing at the first failure.
ipa "$B" nft -f - <<NFT
table netdev lossy {
$(drop_set callee_to_relay)
    chain egress {
        type filter hook egress device "b0" priority 0; policy accept;
$(drop_rule callee_to_relay "ip daddr 10.90.1.1 udp sport 20000-29999" 3)
    }
}
NFT

if [ "$relay" = calliper ]; then
    # Calliper's edge node: the same ng socket, address and ports.
    cat >"$out/edge.toml" <<TOML
id = 1
listen = "127.0.0.1:7000"
neighbours = []
[edge]
control = "udp:127.0.0.1:2223"
address = "10.90.1.1"
ports = "40000-40999"
TOML
    ip netns exec "$P" "$CALLIPER" relay run "$out/edge.toml" --stats "$out/edge-stats.json" \
        >"$out/rtpengine.log" 2>&1 &
else
    ip netns exec "$P" rtpengine --table=-1 --interface=10.90.1.1 --listen-ng=127.0.0.1:2223 \
        --port-min=40000 --port-max=40999 --foreground --log-stderr >"$out/rtpengine.log" 2>&1 &
fi
relay_pid=$!
pids+=($relay_pid)
if [ "$relay" = calliper ]; then
    sleep 0.5
else
    await_line "$out/rtpengine.log" "Startup complete" rtpengine "$relay_pid"
fi
ipa "$P" kamailio -f "$here/kamailio.cfg" -A WITH_RTPENGINE -DD -E -P "$out/kamailio.pid" >"$out/kamailio.log" 2>&1 &
pids+=($!)
for i in pa pb; do
    ip netns exec "$P" tcpdump -i $i -U -s 0 -w "$out/relay-$i.pcap" 2>"$out/tcpdump-$i.log" &
    pids+=($!)
done
sleep 1.5

sipp_calls "$calls" "$out/rtpengine.log" "$out/kamailio.log"
sleep 1
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 0.5
mergecap -w "$out/relay.pcap" "$out/relay-pa.pcap" "$out/relay-pb.pcap"
{
    echo '['
    ipa "$P" nft -j list set inet lossy relay_to_callee
    echo ','
    ipa "$P" nft -j list set inet lossy relay_to_caller
    echo ','
    ipa "$B" nft -j list set netdev lossy callee_to_relay
    echo ']'
} >"$out/drops.json"
echo "netns: $calls relayed calls captured to $out/relay.pcap"
