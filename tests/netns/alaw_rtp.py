#!/usr/bin/env python3
"""A-law bytes as an RTP capture for SIPp's play_pcap_audio: payload type 8,
160 bytes (20 ms) per packet, one packet each 20 ms of capture time.
Used by tests/netns/speech.sh and benches/relay_pesq.sh.

usage: alaw_rtp.py SPEECH.alaw OUT.pcap
"""
import struct
import sys

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
