#!/usr/bin/env bash
# One linphonec call A->B through pq-m with loss on A->B RTP; B records what it plays out
# (after oRTP adaptive jitter buffer + MSGenericPLC, clocked by the mediastreamer ticker).
# usage: run-linphone.sh OUT none | random PCT | ge P R [SEED] | bern PCT [SEED]
# Needs ./netns-up.sh first. Writes OUT/{rec.wav,callee.pcap,a.log,b.log,drops.json,loss.txt}
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd); mode=$2
REF=${REF:-$here/speech8k.wav}
CALL_S=${CALL_S:-$(python3 -c "import soundfile as s;print(round(s.info('$REF').duration+0.3,2))")}
x() { ip netns exec "$@"; }
rm -rf "$out"/*; mkdir -p "$out/home-a/.local/share/linphone" "$out/home-b/.local/share/linphone"
cp "$here/linphone/rc-a.tmpl" "$out/rc-a"; cp "$here/linphone/rc-b.tmpl" "$out/rc-b"

x pq-m nft delete table inet lossy 2>/dev/null || true
x pq-m iptables -F FORWARD
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
    x pq-m iptables -A FORWARD -s 10.77.1.2 -d 10.77.2.2 -p udp --sport 40000:40999 --dport 40000:40999 -j NFQUEUE --queue-num 0 --queue-bypass ;;
  *) echo "bad mode"; exit 2 ;;
esac

ip netns exec pq-b tcpdump -i b0 -U -s0 -w "$out/callee.pcap" udp 2>"$out/tcpdump.log" & td=$!
# callee: auto-answer, plays silence, records the decoded/played-out audio
( echo "soundcard use files"; echo "autoanswer enable"; echo "play $here/silence30.wav"; echo "record $out/rec.wav"
  sleep $(python3 -c "print($CALL_S+8)"); echo quit ) |
  HOME=$out/home-b ip netns exec pq-b linphonec -c "$out/rc-b" -d 6 -l "$out/b.log" > "$out/b.out" 2>&1 & bpid=$!
# caller: waits for its core to be up (network reachability), calls, hangs up after CALL_S
( echo "soundcard use files"; sleep 3; echo "play $REF"; echo "call sip:bob@10.77.2.2"; sleep $CALL_S; echo terminate; sleep 1; echo quit ) |
  HOME=$out/home-a ip netns exec pq-a linphonec -c "$out/rc-a" -d 6 -l "$out/a.log" > "$out/a.out" 2>&1
for i in $(seq 1 100); do grep -q "ended" "$out/b.out" 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -INT $bpid 2>/dev/null || true
sleep 0.5; kill -INT $td; wait $td 2>/dev/null || true
[ -n "$dpid" ] && { kill -TERM $dpid; wait $dpid 2>/dev/null || true; }
{ x pq-m nft list table inet lossy; x pq-m iptables -L FORWARD -v -n; } > "$out/loss.txt"
x pq-m iptables -F FORWARD; x pq-m nft delete table inet lossy
echo "$out: rec.wav $(soxi -D "$out/rec.wav") s, $(stat -c %s "$out/rec.wav") bytes; pcap $(stat -c %s "$out/callee.pcap") bytes"
