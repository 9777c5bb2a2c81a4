#!/usr/bin/env bash
# One linphonec call from pq-a to pq-b through pq-m, which drops the caller's
# RTP (never RTCP) by the pattern given; run by run.sh, inside its namespaces.
#   call.sh OUT SPEECH.wav SILENCE.wav none
#   call.sh OUT SPEECH.wav SILENCE.wav bern LOSS SEED      (random loss, 0..1)
#   call.sh OUT SPEECH.wav SILENCE.wav ge P R SEED         (Gilbert: loss p/(p+r), mean burst 1/r)
# The callee records what it plays out (oRTP's adaptive jitter buffer, then
# mediastreamer's PLC, clocked): OUT/rec.wav. tcpdump beside the callee
# writes OUT/callee.pcap; the dropper's ground truth is OUT/drops.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1 speech=$2 silence=$3 mode=$4
rm -rf "$out"
mkdir -p "$out/home-a/.local/share/linphone" "$out/home-b/.local/share/linphone"
# CODEC (PCMU by default, G722, opus): the one codec both ends offer.
codec=${CODEC:-PCMU}
for rc in rc-a rc-b; do
    awk -v codec="$codec" '
        /^\[/ { in_codec = /^\[audio_codec_/ }
        in_codec && /^mime=/ { mine = (substr($0, 6) == codec) }
        in_codec && /^enabled=/ { print "enabled=" (mine ? 1 : 0); next }
        { print }' "$here/linphonerc" >"$out/$rc"
done
grep -q "^mime=$codec\$" "$out/rc-a" || { echo "call.sh: no codec '$codec' in linphonerc" >&2; exit 2; }
call_s=$(soxi -D "$speech" | awk '{printf "%.2f", $1 + 0.3}')
# Not through a function for what runs in the background: kill must reach
# the program, not a subshell.
x() { ip netns exec "$@"; }

dropper= tcpdump= callee=
# Whatever way this ends, nothing it started outlives it.
trap 'kill $dropper $tcpdump $callee 2>/dev/null || true; x pq-m iptables -F FORWARD 2>/dev/null || true' EXIT
case $mode in
none) ;;
bern) args=(--bernoulli "$5" --seed "$6") ;;
ge) args=(--p "$5" --r "$6" --seed "$7") ;;
*) echo "call.sh: unknown loss mode '$mode'" >&2; exit 2 ;;
esac
if [ "$mode" != none ]; then
    ip netns exec pq-m python3 "$here/ge_dropper.py" --queue 0 "${args[@]}" --log "$out/drops.json" 2>"$out/dropper.log" &
    dropper=$!
    sleep 0.5
    x pq-m iptables -A FORWARD -s 10.77.1.2 -d 10.77.2.2 -p udp --sport 40000:40999 --dport 40000:40999 \
        -j NFQUEUE --queue-num 0
fi

ip netns exec pq-b tcpdump -i b0 -U -s0 -w "$out/callee.pcap" udp 2>"$out/tcpdump.log" &
tcpdump=$!
# Callee: answers, sends silence, records what it plays.
(
    echo "soundcard use files"; echo "autoanswer enable"; echo "play $silence"; echo "record $out/rec.wav"
    sleep "$(awk "BEGIN{print $call_s + 8}")"; echo quit
) | HOME=$out/home-b ip netns exec pq-b linphonec -c "$out/rc-b" -d 6 -l "$out/b.log" >"$out/b.out" 2>&1 &
callee=$!
# Caller: waits for its core to come up, plays the speech, hangs up at its end.
(
    echo "soundcard use files"; sleep 3; echo "play $speech"; echo "call sip:bob@10.77.2.2"
    sleep "$call_s"; echo terminate; sleep 1; echo quit
) | HOME=$out/home-a x pq-a linphonec -c "$out/rc-a" -d 6 -l "$out/a.log" >"$out/a.out" 2>&1
for _ in $(seq 1 100); do grep -q "ended" "$out/b.out" 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -INT "$callee" 2>/dev/null || true
sleep 0.5
kill -INT "$tcpdump" 2>/dev/null || true
wait "$tcpdump" 2>/dev/null || true
if [ -n "$dropper" ]; then
    x pq-m iptables -F FORWARD
    kill -TERM "$dropper"
    wait "$dropper" 2>/dev/null || true
fi
[ -s "$out/rec.wav" ] || { echo "call.sh: the callee recorded nothing; see $out/b.log" >&2; exit 1; }
