#!/usr/bin/env bash
# The Spines paper's claim (voice at PSTN quality up to 7 % loss per hop),
# measured with real speech: one SIPp call per condition plays four Harvard
# sentences (espeak-ng, G.711 A-law, 20 ms packets) across the lossy path
# of tests/netns/relay_path.sh (caller - edge A - core - edge C - callee,
# or with a second core: two or three lossy hops each way, LOSS % dropped
# where each link leaves each node, at random or in bursts), through
#   rtpengine     rtpengine at both edges (plain RTP over the path)
#   no-recovery   Calliper's overlay with `recovery = false`
#   overlay       Calliper's overlay, recovering hop by hop
# What the callee received is decoded as a receiver with spandsp's PLC would
# play it (tests/pesq/plc_decode.py) and scored with PESQ (ITU-T P.862,
# narrowband) against the speech sent; Calliper's MOS is the callee probe's
# for the same stream.
#
# usage: sudo benches/relay_pesq.sh OUT [CONDITION...]
#   CONDITION: HOPSxLOSS, or HOPSxLOSSbBURST for bursts of BURST packets on
#   average (Gilbert-Elliott); default: 0, 1, 3, 5 and 7 % random and 5 and
#   7 % in bursts of 3, each over 2 and 3 hops (14 conditions, 42 calls).
# Writes OUT/results.tsv (a row per call), OUT/table.md and
# OUT/plot-2hops.svg, OUT/plot-3hops.svg (random loss).
# Needs root (namespaces, nftables, iptables), `cargo build --release`, and
#   apt-get install sip-tester kamailio rtpengine-daemon nftables iptables \
#       tcpdump tshark espeak-ng sox libspandsp2 libnetfilter-queue-dev \
#       python3-venv python3-dev gcc
#   python3 -m venv target/pesq-python
#   target/pesq-python/bin/pip install numpy cython
#   target/pesq-python/bin/pip install pesq numpy scipy soundfile netfilterqueue
# (scripts/test.sh does the same before the tests; target/pesq-python is
# used if it is there). CALLIPER names the binary (default
# target/release/calliper; with sudo: sudo CALLIPER=... benches/...).
# One call per condition and mode, about 20 s each: 14 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,32p' "$0"; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
conditions=("$@")
if [ ${#conditions[@]} = 0 ]; then
    for hops in 2 3; do
        conditions+=("${hops}x0" "${hops}x1" "${hops}x3" "${hops}x5" "${hops}x7" "${hops}x5b3" "${hops}x7b3")
    done
fi
export CALLIPER=${CALLIPER:-$root/target/release/calliper}
[ -x "$CALLIPER" ] || { echo "relay_pesq.sh: no $CALLIPER (cargo build --release)" >&2; exit 1; }
[ -d "$root/target/pesq-python" ] && export PATH=$root/target/pesq-python/bin:$PATH
python3 -c "import pesq, numpy, scipy, soundfile, netfilterqueue" 2>/dev/null || {
    echo "relay_pesq.sh: python3 needs pesq, numpy, scipy, soundfile, netfilterqueue (scripts/test.sh makes target/pesq-python)" >&2
    exit 1
}

[ ! -e "$out/calls" ] || { echo "relay_pesq.sh: $out/calls exists: give a new OUT" >&2; exit 2; }
"$root/tests/pesq/sentences.sh" "$out"
sox "$out/speech.wav" -t raw -e a-law -b 8 "$out/speech.alaw"
# The A-law bytes as RTP for SIPp to play (the codec tests/netns/uac.xml
# and uas.xml offer and answer).
python3 "$root/tests/netns/alaw_rtp.py" "$out/speech.alaw" "$out/speech.pcap"
pause_ms=$(awk "BEGIN{printf \"%d\", $(soxi -D "$out/speech.wav") * 1000 + 1500}")
sed -e "s|/usr/share/sip-tester/g711a.pcap|$out/speech.pcap|" \
    -e "s|<pause milliseconds=\"8000\"/>|<pause milliseconds=\"$pause_ms\"/>|" \
    "$root/tests/netns/uac.xml" >"$out/uac.xml"
grep -q "$out/speech.pcap" "$out/uac.xml" && grep -q "RTP/AVP 8" "$out/uac.xml" ||
    { echo "relay_pesq.sh: tests/netns/uac.xml has changed" >&2; exit 1; }
export UAC_XML=$out/uac.xml
# The ceiling: the speech through A-law and back, no network at all.
sox -t raw -r 8000 -c 1 -e a-law -b 8 "$out/speech.alaw" -e signed-integer -b 16 "$out/speech-g711.wav"
echo "PESQ of the speech through G.711 alone: $(python3 "$root/tests/pesq/score.py" "$out/speech.wav" "$out/speech-g711.wav")" |
    tee "$out/ceiling.txt"

printf 'hops\tloss_per_hop\tburst\tmode\treceived\tsent\tcalliper_lost\tcalliper_mos\tpesq\n' >"$out/results.tsv"
sent=$(( $(stat -c %s "$out/speech.alaw") / 160 ))
mkdir -p "$out/calls"
for c in "${conditions[@]}"; do
    [[ "$c" =~ ^([23])x([0-9]+)(b([0-9]+))?$ ]] ||
        { echo "relay_pesq.sh: $c is not a condition (HOPSxLOSS or HOPSxLOSSbBURST)" >&2; exit 2; }
    hops=${BASH_REMATCH[1]} loss=${BASH_REMATCH[2]} burst=${BASH_REMATCH[4]:-1}
    for mode in rtpengine no-recovery overlay; do
        dir=$out/calls/$c-$mode
        relay=calliper recovery=1
        [ "$mode" != rtpengine ] || relay=rtpengine
        [ "$mode" != no-recovery ] || recovery=0
        RELAY=$relay RECOVERY=$recovery HOPS=$hops BURST=$burst \
            "$root/tests/netns/relay_path.sh" "$dir" 1 "$loss" 0 >"$dir.log" 2>&1 ||
            { echo "relay_pesq.sh: the call ($c, $mode) failed:" >&2; tail -20 "$dir.log" >&2; exit 1; }
        decoded=$(python3 "$root/tests/pesq/plc_decode.py" "$dir/callee.pcap" 10.90.2.1 "$dir/received.wav")
        score=$(python3 "$root/tests/pesq/score.py" "$out/speech.wav" "$dir/received.wav")
        stream=$(python3 - "$dir/callee.jsonl" <<'PY'
import json, sys
streams = [s for l in open(sys.argv[1]) for o in [json.loads(l)] if o["type"] == "call"
           for s in o["streams"] if s["dst"] == "10.90.2.2"]
assert len(streams) == 1, f"expected one stream to the callee, found {len(streams)}"
s = streams[0]
print(f"{s['packets']}\t{s['lost']}\t{s['mos']:.3f}")
PY
)
        IFS=$'\t' read -r received lost mos <<<"$stream"
        row="$hops	$loss	$burst	$mode	$received	$sent	$lost	$mos	$score"
        echo "$row" >>"$out/results.tsv"
        echo "$row    ($decoded)"
    done
done
python3 "$root/benches/relay_pesq.py" "$out/results.tsv" "$(cut -d: -f2 "$out/ceiling.txt" | tr -d ' ')" "$out"
