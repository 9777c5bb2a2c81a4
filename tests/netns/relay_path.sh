#!/usr/bin/env bash
# Calls across a lossy path of three nodes (or four, HOPS=3), their media
# relayed at both ends:
#
#   caller ── edge A ───────── core ───────── edge C ── callee
#   A          EA              R              EC         B
#   10.90.1.2  10.90.1.1       10.91.1.2      10.91.2.1  10.90.2.2
#              10.91.1.1  ──── 10.91.2.2 ──── 10.90.2.1
#              Kamailio PATH_A  (IP router;    Kamailio PATH_C
#              + media relay    relay node 2)  + media relay
#
# Each edge's Kamailio (tests/netns/kamailio-edge.cfg) steers the calls'
# media into the relay beside it with rtpengine_manage(). nftables drops
# LOSS % of every UDP datagram that is not SIP, at random, where each of the
# two links leaves each of its ends (both directions of A–R and R–C).
# RELAY picks the media relays:
#   rtpengine  (the baseline) rtpengine at both edges: the media crosses
#              the path as plain RTP and loses what the links drop.
#   calliper   Calliper edge nodes 1 and 3 and a core node 2 (`calliper
#              relay run`, keyed links): the media crosses the overlay,
#              which recovers losses hop by hop. A forger in a namespace of
#              its own (X), owning edge A's address 10.91.1.1, sends the
#              core FORGED datagrams of each kind (DATA, NACK, HELLO, LSU,
#              CRTP_STATE) from edge A's overlay port while the calls run.
# HOPS=3 puts a second core router (and relay node 4) between the core and
# edge C: three lossy hops each way. BURST=N (N > 1) makes the loss come in
# bursts of N packets on average (Gilbert-Elliott, on a netfilter queue per
# link end; needs python3's netfilterqueue), at the same mean LOSS %.
# RECOVERY=0 turns the overlay's recovery off (`recovery = false`), for
# comparison; UAC_XML is the caller's SIPp scenario (sipp_calls.sh).
# `calliper probe` watches each party's interface. Writes to OUT:
#   callee.jsonl, caller.jsonl   the two probes' records
#   callee.pcap, caller.pcap     the same interfaces, captured by tcpdump
#   drops.json                   nftables' drop counters per link end
#                                (drops-DEV.json, the droppers' logs, with BURST)
#   node-1.json .. node-3.json   the nodes' counters (calliper)
#
# usage: tests/netns/relay_path.sh OUT [CALLS] [LOSS] [FORGED]
#        RELAY=rtpengine|calliper, CALLIPER names the binary
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
# The probes append to their outputs: a run of its own in a fresh directory.
[ -z "$(ls -A "$out")" ] || { echo "relay_path.sh: $out is not empty: give a new directory" >&2; exit 2; }
calls=${2:-8}
loss=${3:-5}
forged=${4:-100}
relay=${RELAY:-calliper}
: "${CALLIPER:?CALLIPER must name the calliper binary}"
hops=${HOPS:-2}
burst=${BURST:-1}
[[ "$hops" =~ ^[23]$ ]] || { echo "relay_path.sh: HOPS is 2 or 3" >&2; exit 2; }
[[ "$calls" =~ ^[1-9][0-9]*$ && "$loss" =~ ^[0-9]+$ && "$loss" -lt 100 && "$burst" =~ ^[1-9][0-9]*$ ]] ||
    { echo "relay_path.sh: CALLS is a count, LOSS a whole percentage below 100, BURST a whole number of packets" >&2; exit 2; }
A=cal-pa-$$ EA=cal-pea-$$ R=cal-pr-$$ R2=cal-pr2-$$ EC=cal-pec-$$ B=cal-pb-$$ X=cal-px-$$
all=("$A" "$EA" "$R" "$EC" "$B" "$X")
[ "$hops" = 2 ] || all+=("$R2")
. "$here/namespaces.sh"
. "$here/edge.sh"
. "$here/sipp_calls.sh"
. "$here/ready.sh"
namespaces "${all[@]}"
link "$A" a0 10.90.1.2/24 "$EA" pa 10.90.1.1/24
link "$EA" x1 10.91.1.1/24 "$R" c1 10.91.1.2/24
link "$EC" pb 10.90.2.1/24 "$B" b0 10.90.2.2/24
ipa "$A" ip route add default via 10.90.1.1
ipa "$B" ip route add default via 10.90.2.1
ipa "$EA" ip route add default via 10.91.1.2
ipa "$R" ip route add 10.90.1.0/24 via 10.91.1.1
# Link ends where the loss is made: (namespace device) pairs.
ends=("$EA x1" "$R c1" "$R c2" "$EC x2")
if [ "$hops" = 2 ]; then
    link "$R" c2 10.91.2.2/24 "$EC" x2 10.91.2.1/24
    ipa "$R" ip route add 10.90.2.0/24 via 10.91.2.1
else
    # A second core router between the first and edge C.
    link "$R" c2 10.91.3.1/24 "$R2" d1 10.91.3.2/24
    link "$R2" d2 10.91.2.2/24 "$EC" x2 10.91.2.1/24
    ipa "$R" ip route add default via 10.91.3.2
    ipa "$R2" ip route add 10.90.2.0/24 via 10.91.2.1
    ipa "$R2" ip route add default via 10.91.3.1
    ends+=("$R2 d1" "$R2 d2")
fi
ipa "$EC" ip route add default via 10.91.2.2
for n in "${all[@]:1}"; do ipa "$n" sysctl -qw net.ipv4.ip_forward=1; done
# The forger owns 10.91.1.1 too, on a link of its own to the core; the
# core must take what comes from there (no reverse-path filter).
ip link add xf netns "$X" type veth peer name c3 netns "$R"
ipa "$X" ip addr add 10.91.1.1/32 dev xf
ipa "$X" ip link set xf up
ipa "$R" ip link set c3 up
for c in all default c3; do ipa "$R" sysctl -qw "net.ipv4.conf.$c.rp_filter=0"; done
ipa "$X" ip route add 10.91.1.2/32 dev xf
ipa "$X" ip neigh add 10.91.1.2 lladdr "$(ipa "$R" cat /sys/class/net/c3/address)" dev xf

# Losses where each link leaves each of its ends, counted per end: at
# random by nftables, or (BURST > 1) in bursts by a Gilbert-Elliott dropper
# on a netfilter queue per end (tests/pesq/ge_dropper.py --any).
nonsip="ip protocol udp udp sport != 5060 udp dport != 5060"
lossy() { # NS DEV
    if [ "$burst" = 1 ]; then
        ipa "$1" nft -f - <<NFT
table netdev lossy_$2 {
    counter drops_$2 { }
    chain out {
        type filter hook egress device "$2" priority 0; policy accept;
        $nonsip numgen random mod 1000 < $((loss * 10)) counter name "drops_$2" drop
    }
}
NFT
        return
    fi
    local q=$((queue += 1))
    # Mean loss p/(p+r) = LOSS %, mean burst 1/r = BURST packets.
    local r p
    r=$(awk "BEGIN{print 1/$burst}")
    p=$(awk "BEGIN{l=$loss/100; print $r*l/(1-l)}")
    ipa "$1" python3 "$here/../pesq/ge_dropper.py" --any --queue "$q" --p "$p" --r "$r" --skip 0 \
        --seed "$q" --log "$out/drops-$2.json" 2>"$out/dropper-$2.log" &
    pids+=($!)
    droppers+=($!)
    # iptables: this kernel has NFQUEUE as an xtables target, not nft's queue.
    local chain
    for chain in OUTPUT FORWARD; do
        ipa "$1" iptables -A "$chain" -o "$2" -p udp ! --sport 5060 ! --dport 5060 -j NFQUEUE --queue-num "$q"
    done
}
queue=0 droppers=()
for e in "${ends[@]}"; do lossy $e; done

if [ "$relay" = calliper ]; then
    for l in 12 23 24 43; do head -c 32 /dev/urandom >"$out/link-$l.key"; done
    # node ID LISTEN NEIGHBOURS [EDGE-ADDRESS PORTS PEER-NODE PEER-ADDRESS]
    node() {
        echo "id = $1"
        echo "listen = \"$2:7000\""
        # One send per datagram, so the loss below decides on each datagram
        # as it does on rtpengine's (a segmented run would be one packet).
        echo "segment_sends = false"
        [ "${RECOVERY:-1}" = 1 ] || echo "recovery = false"
        local n
        for n in $3; do
            local id=${n%%@*} rest=${n#*@}
            echo "[[neighbours]]"
            echo "id = $id"
            echo "addr = \"${rest%%,*}:7000\""
            echo "key_file = \"${rest#*,}\""
        done
        [ $# -gt 3 ] || return 0
        edge_table 127.0.0.1:2223 "$4" "$5" "$6" "$7"
    }
    # Edge C's neighbour: the core (node 2), or the second core (node 4).
    if [ "$hops" = 2 ]; then
        before_c="2@10.91.1.2,$out/link-23.key"
        node 2 10.91.1.2 "1@10.91.1.1,$out/link-12.key 3@10.91.2.1,$out/link-23.key" >"$out/node-2.toml"
    else
        before_c="4@10.91.2.2,$out/link-43.key"
        node 2 10.91.1.2 "1@10.91.1.1,$out/link-12.key 4@10.91.2.2,$out/link-24.key" >"$out/node-2.toml"
        node 4 10.91.2.2 "2@10.91.1.2,$out/link-24.key 3@10.91.2.1,$out/link-43.key" >"$out/node-4.toml"
    fi
    node 1 10.91.1.1 "2@10.91.1.2,$out/link-12.key" 10.90.1.1 40000-40999 3 10.90.2.1 >"$out/node-1.toml"
    node 3 10.91.2.1 "$before_c" 10.90.2.1 40000-40999 1 10.90.1.1 >"$out/node-3.toml"
    declare -A nodes=([1]="$EA" [2]="$R" [3]="$EC" [4]="$R2")
    node_pids=()
    for i in 1 2 3 $([ "$hops" = 2 ] || echo 4); do
        ip netns exec "${nodes[$i]}" "$CALLIPER" relay run "$out/node-$i.toml" --stats "$out/node-$i.json" \
            >"$out/node-$i.log" 2>&1 &
        node_pids+=($!)
        pids+=($!)
    done
else
    declare -A rtpengine_pid
    for ns in "$EA:10.90.1.1" "$EC:10.90.2.1"; do
        ip netns exec "${ns%%:*}" rtpengine --table=-1 --interface="${ns#*:}" --listen-ng=127.0.0.1:2223 \
            --port-min=40000 --port-max=40999 --foreground --log-stderr \
            >"$out/rtpengine-${ns#*:}.log" 2>&1 &
        pids+=($!)
        rtpengine_pid[${ns#*:}]=$!
    done
    for a in 10.90.1.1 10.90.2.1; do
        await_line "$out/rtpengine-$a.log" "Startup complete" "rtpengine at $a" "${rtpengine_pid[$a]}"
    done
fi
ipa "$EA" kamailio -f "$here/kamailio-edge.cfg" -A PATH_A -DD -E -P "$out/kamailio-a.pid" \
    >"$out/kamailio-a.log" 2>&1 &
pids+=($!)
ipa "$EC" kamailio -f "$here/kamailio-edge.cfg" -A PATH_C -DD -E -P "$out/kamailio-c.pid" \
    >"$out/kamailio-c.log" 2>&1 &
pids+=($!)
probes=()
for party in "$A:a0:caller" "$B:b0:callee"; do
    IFS=: read -r ns dev name <<<"$party"
    ip netns exec "$ns" "$CALLIPER" probe -i "$dev" --status-every 1 --format jsonl \
        -o "$out/$name.jsonl" 2>"$out/probe-$name.log" &
    probes+=($!)
    pids+=($!)
    ip netns exec "$ns" tcpdump -i "$dev" -U -s 0 -w "$out/$name.pcap" 2>"$out/tcpdump-$name.log" &
    pids+=($!)
done
# The overlay's links come up (HELLOs) and the probes open their rings.
sleep 2

if [ "$relay" = calliper ] && [ "$forged" -gt 0 ]; then
    # Well-formed frames of each kind with a made-up trailer (counter,
    # tag): only the link's key could have made a valid one.
    ip netns exec "$X" python3 - "$forged" <<'PY' &
import os, socket, struct, sys, time
n = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.91.1.1", 7000))
bodies = {
    1: struct.pack(">HHHBxIIQ", 1, 3, 2223, 8, 1, 1, 0) + os.urandom(172),  # DATA
    2: struct.pack(">H", 1) + struct.pack(">I", 7),                         # NACK
    3: struct.pack(">Q", time.time_ns() // 1000),                           # HELLO
    4: struct.pack(">HIH", 1, 99, 1) + struct.pack(">HH", 3, 1),            # LSU
    6: os.urandom(40),                                                      # CRTP_STATE
}
for i in range(n):
    for kind, body in bodies.items():
        head = bytes([0xCA, 0x11, kind, 0]) + struct.pack(">I", 1000 + i)
        trailer = struct.pack(">Q", time.time_ns()) + os.urandom(16)
        s.sendto(head + body + trailer, ("10.91.1.2", 7000))
    time.sleep(0.01)
PY
    pids+=($!)
fi
sipp_calls "$calls" "$out"/node-*.log "$out"/rtpengine-*.log "$out"/kamailio-*.log
sleep 1
if [ "$relay" = calliper ]; then
    # The nodes write their counters when stopped.
    kill -INT "${node_pids[@]}"
    for p in "${node_pids[@]}"; do
        wait "$p" || { echo "a node failed:"; tail -5 "$out"/node-*.log; exit 1; }
    done
fi
# The probes write the calls still open when stopped.
kill -TERM "${probes[@]}"
for i in 0 1; do
    wait "${probes[$i]}" || { echo "a probe failed:"; cat "$out"/probe-*.log; exit 1; }
done
if [ "$burst" = 1 ]; then
    {
        sep='['
        for e in "${ends[@]}"; do
            read -r ns dev <<<"$e"
            echo "$sep"
            ipa "$ns" nft -j list counters table netdev "lossy_$dev"
            sep=','
        done
        echo ']'
    } >"$out/drops.json"
else
    # The droppers write their logs (drops-DEV.json) when stopped.
    kill -TERM "${droppers[@]}"
    wait "${droppers[@]}" || true
fi
echo "netns: $calls calls across the path ($relay, $loss % loss per link end) in $out"
