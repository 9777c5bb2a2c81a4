#!/usr/bin/env bash
# Builds three network namespaces joined by veth pairs,
#
#   caller 10.90.1.2 ── 10.90.1.1 proxy 10.90.2.1 ── 10.90.2.2 callee
#   (SIPp, UDP)          (Kamailio, nftables)          (SIPp, TCP)
#
# runs CALLS SIPp calls through the record-routing Kamailio (UDP on the
# caller's leg, TCP on the callee's), drops a share of the RTP in the proxy
# with nftables, and captures each side's received traffic. Writes to OUT:
#   calls.pcap   both captures merged (caller side + callee side)
#   drops.json   nftables' per-stream drop counters (the ground truth)
#
# With CALLIPER set to a calliper binary, `calliper probe` (2 threads) also
# runs live in the proxy on both its interfaces, keeping what the proxy
# sends (after the drops), while tcpdump captures the same:
#   probe.jsonl  the probe's records, written as calls end
#   proxy.pcap   tcpdump's capture of the same packets
# and Kamailio mirrors its SIP as HEP3 (siptrace) to a second probe,
# `calliper probe --hep-listen` with a key, in the proxy:
#   hep.jsonl    that probe's records, from HEP alone
#
# usage: [CALLIPER=path] tests/netns/run.sh OUT [CALLS]
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
calls=${2:-3}
A=cal-a-$$ B=cal-b-$$ P=cal-p-$$
. "$here/topology.sh"
. "$here/baresip.sh"
ipa "$P" sysctl -qw net.ipv4.ip_forward=1

# Drop RTP (not RTCP: second byte below 200) forwarded between the sides,
# counted per stream in one set. Every drop must be a visible gap, so the
# last packet of a stream is never dropped:
# - SIPp (ports 20000-39999) replays g711a.pcap, whose first and last sequence
#   numbers are 5 and 0 mod 8: drop a random half of those that are 3 mod 8;
# - baresip (ports 40000-40999): a random 5 %, by a rule deleted before hangup.
ipa "$P" nft -f - <<'NFT'
table inet lossy {
    set drops {
        type ipv4_addr . inet_service . ipv4_addr . inet_service
        flags dynamic
        counter
    }
    chain forward {
        type filter hook forward priority 0; policy accept;
        udp dport 20000-39999 udp sport 20000-39999 @th,72,8 < 200 @th,80,16 & 7 == 3 numgen random mod 2 == 0 update @drops { ip saddr . udp sport . ip daddr . udp dport } counter drop
    }
}
NFT

hep_probe=
if [ -n "${CALLIPER:-}" ]; then
    printf 'calliper-netns-key\n' >"$out/hep.key"
    chmod 600 "$out/hep.key"
    ip netns exec "$P" "$CALLIPER" probe --hep-listen udp:10.90.1.1:9060 --hep-listen-key "$out/hep.key" \
        --status-every 1 --format jsonl -o "$out/hep.jsonl" 2>"$out/hep-probe.log" &
    hep_probe=$!
fi
ipa "$P" kamailio -f "$here/kamailio.cfg" ${hep_probe:+-A WITH_HEP} -DD -E -P "$out/kamailio.pid" >"$out/kamailio.log" 2>&1 &
pids+=($!)
# Each side captures what it receives (and its signalling): RTP after the drop.
ipa "$A" tcpdump -i a0 -U -s 0 -w "$out/caller.pcap" 'udp port 5060 or (udp and dst host 10.90.1.2)' 2>"$out/tcpdump-a.log" &
pids+=($!)
ipa "$B" tcpdump -i b0 -U -s 0 -w "$out/callee.pcap" 'tcp port 5060 or (udp and dst host 10.90.2.2)' 2>"$out/tcpdump-b.log" &
pids+=($!)
probe=
if [ -n "${CALLIPER:-}" ]; then
    for i in pa pb; do
        # Not through `ipa`: a backgrounded function is a subshell, and the
        # signals below must reach the program itself.
        ip netns exec "$P" tcpdump -i $i -Q out --time-stamp-precision=nano -U -s 0 -w "$out/proxy-$i.pcap" 2>"$out/tcpdump-$i.log" &
        pids+=($!)
    done
    ip netns exec "$P" "$CALLIPER" probe -i pa -i pb --direction out --threads 2 --status-every 1 \
        --format jsonl -o "$out/probe.jsonl" 2>"$out/probe.log" &
    probe=$!
fi
sleep 1.5

sipp_calls "$calls"
sleep 1

# A baresip call through the same proxy: audio from a WAV file, real RTCP.
if command -v baresip >/dev/null; then
    baresip_setup "$out" 40000-40999
    baresip_call "$out" 12
    # Start dropping once media flows, so no stream loses its first packet
    # (a loss before the first packet is invisible to any receiver).
    sleep 2
    ipa "$P" nft add rule inet lossy forward udp dport 40000-40999 udp sport 40000-40999 '@th,72,8 < 200' \
        numgen random mod 100 '< 5' update @drops '{ ip saddr . udp sport . ip daddr . udp dport }' counter drop
    sleep 7
    # Stop dropping before hangup so the last packets of each stream arrive.
    h=$(ipa "$P" nft -a list chain inet lossy forward | awk '/40000-40999/ {print $NF}')
    ipa "$P" nft delete rule inet lossy forward handle "$h"
    wait "$caller" || true
    wait "$callee" || true
    sleep 0.5
fi
if [ -n "$probe" ]; then
    # Calls end 5 s after BYE (--call-grace): the probe writes them as they
    # end, before the signal; SIGTERM then writes whatever is still open.
    sleep 6
    kill -TERM "$probe" "$hep_probe"
    wait "$probe" || { echo "probe failed:"; cat "$out/probe.log"; exit 1; }
    wait "$hep_probe" || { echo "HEP probe failed:"; cat "$out/hep-probe.log"; exit 1; }
fi
for p in "${pids[@]:1}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 0.5
mergecap -w "$out/calls.pcap" "$out/caller.pcap" "$out/callee.pcap"
[ -z "$probe" ] || mergecap -w "$out/proxy.pcap" "$out/proxy-pa.pcap" "$out/proxy-pb.pcap"
ipa "$P" nft -j list set inet lossy drops >"$out/drops.json"
echo "netns: $calls calls captured to $out/calls.pcap"
