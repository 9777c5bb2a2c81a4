#!/usr/bin/env python3
"""Builds fuzz seed corpora from real captures.

usage: seeds.py OUT_DIR CAPTURE...

Each capture (classic pcap) is split into what each fuzz target reads:
whole files (capture), link-type byte + frame (decode), raw IP packets
framed as the engine target expects (engine), UDP payloads that look like
SIP (sip), SDP bodies (sdp) and RTP/RTCP payloads (rtp_rtcp).
"""
import hashlib
import os
import struct
import sys

LINKS = [1, 101, 113, 276, 0, 108, 12, 228]


def packets(path):
    data = open(path, "rb").read()
    if len(data) < 24:
        return None, []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        return None, []
    link = struct.unpack(end + "I", data[20:24])[0] & 0xFFFF
    out, at = [], 24
    while at + 16 <= len(data):
        incl = struct.unpack(end + "I", data[at + 8:at + 12])[0]
        out.append(data[at + 16:at + 16 + incl])
        at += 16 + incl
    return link, out


def ip_of(link, frame):
    if link == 1 and len(frame) > 14:
        et = struct.unpack(">H", frame[12:14])[0]
        off = 14
        while et == 0x8100 and len(frame) > off + 4:
            et = struct.unpack(">H", frame[off + 2:off + 4])[0]
            off += 4
        return frame[off:] if et in (0x0800, 0x86DD) else None
    if link == 113 and len(frame) > 16:
        return frame[16:]
    if link == 101:
        return frame
    return None


def udp_payload(ip):
    if len(ip) >= 28 and ip[0] >> 4 == 4 and ip[9] == 17:
        ihl = (ip[0] & 15) * 4
        return ip[ihl + 8:]
    if len(ip) >= 48 and ip[0] >> 4 == 6 and ip[6] == 17:
        return ip[48:]
    return None


def save(out, target, blob):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(blob).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


def main():
    out = sys.argv[1]
    for path in sys.argv[2:]:
        if os.path.getsize(path) < 2_000_000:
            save(out, "capture", open(path, "rb").read())
        link, frames = packets(path)
        if link is None:
            continue
        engine = b""
        for frame in frames[:400]:
            if link in LINKS:
                save(out, "decode", bytes([LINKS.index(link)]) + frame)
            ip = ip_of(link, frame)
            if ip is None:
                continue
            if len(engine) < 60_000:
                engine += struct.pack(">HB", len(ip), 1) + ip
            p = udp_payload(ip)
            if not p:
                continue
            if p[:1].isalpha():
                save(out, "sip", p)
                body = p.split(b"\r\n\r\n", 1)
                if len(body) == 2 and body[1].startswith(b"v=0"):
                    save(out, "sdp", body[1])
            elif p[0] >> 6 == 2:
                save(out, "rtp_rtcp", p)
        if engine:
            save(out, "engine", engine)
    for t in ("defrag", "tcp", "relay"):
        # Structured inputs: a few hand-made sequences to start from.
        save(out, t, bytes(range(64)) * 4)


main()
