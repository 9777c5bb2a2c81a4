#!/usr/bin/env bash
# The namespace topology (topology.sh) with the media relayed by rtpengine,
# which sends the RTCP it relays to a HEP collector (`--homer`, type 5
# JSON), while Kamailio mirrors its SIP there too (siptrace); the collector
# is `calliper probe --hep-listen udp:127.0.0.1:9060` in the proxy (a
# 300 ms reorder window, --hep-reorder-ms, as on a loaded host). One
# baresip call (real RTCP, every few seconds) crosses it. Writes to OUT:
#   hep.jsonl    the collector's records
#   rtcp.pcap    what the proxy received (both interfaces, inbound only):
#                each RTCP packet rtpengine relayed, once
#
# usage: CALLIPER=path tests/netns/hep_rtcp.sh OUT
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
A=cal-ha-$$ B=cal-hb-$$ P=cal-hp-$$
. "$here/topology.sh"
. "$here/baresip.sh"
ipa "$P" sysctl -qw net.ipv4.ip_forward=1

ip netns exec "$P" "$CALLIPER" probe --hep-listen udp:127.0.0.1:9060 --hep-reorder-ms 300 --status-every 1 \
    --format jsonl -o "$out/hep.jsonl" 2>"$out/hep-probe.log" &
probe=$!
ip netns exec "$P" rtpengine --table=-1 --interface=10.90.1.1 --listen-ng=127.0.0.1:2223 \
    --port-min=40000 --port-max=40999 --homer=127.0.0.1:9060 --homer-protocol=udp --homer-id=2002 \
    --foreground --log-stderr >"$out/rtpengine.log" 2>&1 &
pids+=($!)
await_line "$out/rtpengine.log" "Startup complete" rtpengine "${pids[-1]}"
ipa "$P" kamailio -f "$here/kamailio.cfg" -A WITH_RTPENGINE -A WITH_HEP_LOOPBACK -DD -E \
    -P "$out/kamailio.pid" >"$out/kamailio.log" 2>&1 &
pids+=($!)
for i in pa pb; do
    ip netns exec "$P" tcpdump -i $i -Q in -U -s 0 -w "$out/rtcp-$i.pcap" udp 2>"$out/tcpdump-$i.log" &
    pids+=($!)
done
sleep 1.5

baresip_setup "$out" 20000-20999
baresip_call "$out" 13
wait "$caller" || true
wait "$callee" || true
# The call ends 5 s after its BYE (--call-grace): written before the signal.
sleep 6
kill -TERM "$probe"
wait "$probe" || { echo "HEP probe failed:"; cat "$out/hep-probe.log"; exit 1; }
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 0.5
mergecap -w "$out/rtcp.pcap" "$out/rtcp-pa.pcap" "$out/rtcp-pb.pcap"
echo "hep_rtcp: done in $out"
