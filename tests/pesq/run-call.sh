#!/usr/bin/env bash
# One call A->B through pq-m with loss on A->B RTP; records B's decoded audio and a pcap.
# usage: run-call.sh OUT none
#        run-call.sh OUT random PCT              (nftables numgen, in pq-m forward)
#        run-call.sh OUT ge P R [SEED]           (Gilbert-Elliott via NFQUEUE, ge_dropper.py)
#        run-call.sh OUT bern PCT [SEED]         (Bernoulli via NFQUEUE, reproducible)
# Needs ./netns-up.sh first. Writes OUT/{dec.wav,callee.pcap,a.log,b.log,drops.json,nft.txt}
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd); mode=$2
REF=${REF:-$here/speech8k.wav}
x() { ip netns exec "$@"; }
rm -rf "$out"/* ; mkdir -p "$out/rec" "$out/cfg-a" "$out/cfg-b"
sed "s#^audio_source .*#audio_source aufile,$REF#" "$here/baresip-a/config" > "$out/cfg-a/config"
cp "$here/baresip-a/accounts" "$out/cfg-a/"
sed "s#^snd_path .*#snd_path $out/rec#" "$here/baresip-b/config" > "$out/cfg-b/config"
cp "$here/baresip-b/accounts" "$out/cfg-b/"

x pq-m nft delete table inet lossy 2>/dev/null || true
RTP='ip saddr 10.77.1.2 ip daddr 10.77.2.2 udp sport 40000-40999 udp dport 40000-40999 @th,72,8 < 200'
x pq-m nft add table inet lossy
x pq-m nft add chain inet lossy forward '{ type filter hook forward priority 0; policy accept; }'
dpid=
case $mode in
  none) ;;
  random) x pq-m nft add rule inet lossy forward $RTP numgen random mod 1000 "< $(python3 -c "print(round($3*10))")" counter drop ;;
  ge|bern)
    if [ $mode = ge ]; then args="--p $3 --r $4 --seed ${5:-1}"; else args="--bernoulli $(python3 -c "print($3/100)") --seed ${4:-1}"; fi
    ip netns exec pq-m python3 "$here/ge_dropper.py" --queue 0 $args --log "$out/drops.json" 2>"$out/dropper.log" &
    dpid=$!
    sleep 0.5
    # this kernel has no nft_queue (CONFIG_NFT_QUEUE unset) but has xt NFQUEUE via nft compat:
    # iptables (nf_tables backend) -j NFQUEUE works. RTCP is passed by the dropper itself.
    x pq-m iptables -A FORWARD -s 10.77.1.2 -d 10.77.2.2 -p udp --sport 40000:40999 --dport 40000:40999 -j NFQUEUE --queue-num 0 --queue-bypass ;;
  *) echo "bad mode"; exit 2 ;;
esac

ip netns exec pq-b tcpdump -i b0 -U -s0 -w "$out/callee.pcap" udp 2>"$out/tcpdump.log" & td=$!
sleep 0.5
ip netns exec pq-b baresip -f "$out/cfg-b" -t 30 > "$out/b.log" 2>&1 & bpid=$!
sleep 1
# caller hangs up by itself at the end of the WAV (aufile EOF -> menu hangs up); -t is a backstop
ip netns exec pq-a baresip -f "$out/cfg-a" -e "/dial sip:bob@10.77.2.2" -t 30 > "$out/a.log" 2>&1 & apid=$!
# wait for the call to end (callee logs "terminated"), bounded
for i in $(seq 1 300); do grep -q "terminated" "$out/b.log" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -INT $apid $bpid 2>/dev/null || true
wait $apid 2>/dev/null || true; wait $bpid 2>/dev/null || true
kill -INT $td; wait $td 2>/dev/null || true
[ -n "$dpid" ] && { kill -TERM $dpid; wait $dpid 2>/dev/null || true; }
x pq-m nft list table inet lossy > "$out/nft.txt"
[ -n "$dpid" ] && { x pq-m iptables -L FORWARD -v -n >> "$out/nft.txt"; x pq-m iptables -F FORWARD; }
x pq-m nft delete table inet lossy
mv "$out"/rec/dump-*-dec.wav "$out/dec.wav"; mv "$out"/rec/dump-*-enc.wav "$out/callee-enc.wav"
echo "$out: dec.wav $(soxi -D "$out/dec.wav") s, $(stat -c %s "$out/dec.wav") bytes; pcap $(stat -c %s "$out/callee.pcap") bytes"
