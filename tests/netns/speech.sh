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
# The A-law bytes as RTP: payload type 8, 160 bytes each 20 ms.
python3 - "$out/speech.alaw" "$out/speech.pcap" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
out = open(sys.argv[2], "wb")
out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
for k, at in enumerate(range(0, len(data) - len(data) % 160, 160)):
    rtp = struct.pack("!BBHII", 0x80, 8, (1000 + k) & 0xFFFF, 5000 + 160 * k, 0x5EEC4) + data[at:at + 160]
    udp = struct.pack("!HHHH", 6000, 6002, 8 + len(rtp), 0) + rtp
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), k & 0xFFFF, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + udp
    frame = b"\x00" * 12 + b"\x08\x00" + ip
    t = k * 20_000
    out.write(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, len(frame), len(frame)) + frame)
PY
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
