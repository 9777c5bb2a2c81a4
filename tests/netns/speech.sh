#!/usr/bin/env bash
# A known speech file through a real SIP call, for the recording's
# sample-exact check:
#
#   caller 10.90.1.2 ── 10.90.1.1 proxy 10.90.2.1 ── 10.90.2.2 callee
#   (SIPp, UDP)          (Kamailio)                    (SIPp, TCP)
#
# The speech (espeak-ng, 8 kHz) is encoded to G.711 A-law by sox; the
# caller's SIPp sends exactly those bytes as RTP (20 ms packets from a pcap
# this script writes), and the callee's side is captured. Writes to OUT:
#   reference.wav  the speech encoded and decoded by sox's G.711: what a
#                  lossless export of the caller's side must equal
#   callee.pcap    what the callee received (its signalling and RTP)
#
# usage: tests/netns/speech.sh OUT
# Exits 77 (skip) only when network namespaces cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)

espeak-ng -v en-us -s 150 -w "$out/speech-raw.wav" "The birch canoe slid on the smooth planks. \
Glue the sheet to the dark blue background."
sox "$out/speech-raw.wav" -r 8000 -c 1 -t raw -e a-law -b 8 "$out/speech.alaw" gain -n -3
sox -t raw -r 8000 -c 1 -e a-law -b 8 "$out/speech.alaw" -e signed-integer -b 16 "$out/reference.wav"
python3 "$here/alaw_rtp.py" "$out/speech.alaw" "$out/speech.pcap"
seconds=$(soxi -D "$out/reference.wav")
pause_ms=$(awk "BEGIN{printf \"%d\", $seconds * 1000 + 1500}")
sed -e "s|/usr/share/sip-tester/g711a.pcap|$out/speech.pcap|" \
    -e "s|<pause milliseconds=\"8000\"/>|<pause milliseconds=\"$pause_ms\"/>|" "$here/uac.xml" >"$out/uac.xml"
grep -q "$out/speech.pcap" "$out/uac.xml" || { echo "speech.sh: uac.xml has changed" >&2; exit 1; }

A=cal-sa-$$ B=cal-sb-$$ P=cal-sp-$$
. "$here/topology.sh"
ipa "$P" sysctl -qw net.ipv4.ip_forward=1
ipa "$P" kamailio -f "$here/kamailio.cfg" -DD -E -P "$out/kamailio.pid" >"$out/kamailio.log" 2>&1 &
pids+=($!)
ipa "$B" tcpdump -i b0 -U -s 0 -w "$out/callee.pcap" 'tcp port 5060 or (udp and dst host 10.90.2.2)' 2>"$out/tcpdump.log" &
pids+=($!)
sleep 1.5
ipa "$B" sipp -sf "$here/uas.xml" -t t1 -i 10.90.2.2 -p 5060 -mi 10.90.2.2 -mp 20000 \
    -m 1 -nostdin -trace_err -error_file "$out/uas-errors.log" >"$out/uas.log" 2>&1 &
uas=$!
pids+=($uas)
sleep 0.5
ipa "$A" sipp -sf "$out/uac.xml" -t u1 -i 10.90.1.2 -p 5060 -mi 10.90.1.2 -mp 30000 \
    -m 1 -nostdin -trace_err -error_file "$out/uac-errors.log" \
    10.90.1.1:5060 >"$out/uac.log" 2>&1 || { echo "caller SIPp failed:"; tail -20 "$out/uac.log" "$out"/uac-errors.log 2>/dev/null; exit 1; }
wait "$uas" || { echo "callee SIPp failed:"; tail -20 "$out/uas.log"; exit 1; }
sleep 0.5
for p in "${pids[@]:1}"; do kill -INT "$p" 2>/dev/null || true; done
sleep 0.5
echo "speech: $seconds s of speech sent; the callee's capture is $out/callee.pcap"
