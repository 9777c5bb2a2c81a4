#!/usr/bin/env python3
"""Decode the caller's G.711 stream (PCMU or PCMA) from a pcap as a receiver with spandsp's
packet-loss concealment would play it: each received packet decoded in
sequence order, each missing packet filled in by spandsp's plc_fillin (the
PLC Asterisk's generic PLC is derived from). No jitter-buffer losses: the
rig's path has no jitter, so every packet that arrived was in time.

usage: plc_decode.py CAPTURE.pcap SRC_IP OUT.wav
"""
import ctypes
import ctypes.util
import struct
import sys

import numpy as np
import soundfile as sf


def mulaw_table():
    """G.711 mu-law to 16-bit linear, every code."""
    out = np.zeros(256, dtype=np.int16)
    for code in range(256):
        u = ~code & 0xFF
        t = ((u & 0x0F) << 3) + 0x84
        t <<= (u & 0x70) >> 4
        out[code] = (0x84 - t) if (u & 0x80) else (t - 0x84)
    return out


def alaw_table():
    """G.711 A-law to 16-bit linear, every code."""
    out = np.zeros(256, dtype=np.int16)
    for code in range(256):
        a = code ^ 0x55
        t = (a & 0x0F) << 4
        seg = (a & 0x70) >> 4
        t = t + 8 if seg == 0 else (t + 0x108) << (seg - 1)
        out[code] = t if (a & 0x80) else -t
    return out


TABLES = {0: mulaw_table, 8: alaw_table}


def rtp_packets(path, src):
    """(payload type, sequence, payload) of every PCMU or PCMA packet from
    src in a classic pcap."""
    data = open(path, "rb").read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    link_len = {1: 14, 113: 16, 276: 20}[linktype]
    src_bytes = bytes(int(x) for x in src.split("."))
    pos, out = 24, []
    while pos + 16 <= len(data):
        caplen = struct.unpack(endian + "I", data[pos + 8 : pos + 12])[0]
        frame = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        ip = frame[link_len:]
        if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17 or ip[12:16] != src_bytes:
            continue
        udp = ip[(ip[0] & 0x0F) * 4 :]
        rtp = udp[8:]
        if len(rtp) < 12 or rtp[0] >> 6 != 2 or rtp[1] & 0x7F not in TABLES:
            continue
        header = 12 + 4 * (rtp[0] & 0x0F)
        out.append((rtp[1] & 0x7F, struct.unpack(">H", rtp[2:4])[0], rtp[header:]))
    return out


def main():
    capture, src, wav = sys.argv[1:4]
    lib = ctypes.CDLL(ctypes.util.find_library("spandsp") or "libspandsp.so.2")
    lib.plc_init.restype = ctypes.c_void_p
    lib.plc_init.argtypes = [ctypes.c_void_p]
    for f in (lib.plc_rx, lib.plc_fillin):
        f.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int16), ctypes.c_int]
    plc = lib.plc_init(None)
    packets = rtp_packets(capture, src)
    if not packets:
        sys.exit(f"{capture}: no PCMU or PCMA packets from {src}")
    table = TABLES[packets[0][0]]()
    # Sequence numbers unwrapped; duplicates and reordering resolved by sorting.
    by_index, base, last = {}, None, None
    for _, seq, payload in packets:
        if base is None:
            base, last = seq, 0
        delta = (seq - base - last + 32768) % 65536 - 32768
        index = last + delta
        last = max(last, index)
        by_index.setdefault(index, payload)
    frame = len(packets[0][2])
    audio, lost = [], 0
    for index in range(min(by_index), max(by_index) + 1):
        buf = (ctypes.c_int16 * frame)()
        if index in by_index:
            pcm = table[np.frombuffer(by_index[index], dtype=np.uint8)]
            buf[: len(pcm)] = pcm.tolist()
            lib.plc_rx(plc, buf, len(pcm))
        else:
            lost += 1
            lib.plc_fillin(plc, buf, frame)
        audio.append(np.frombuffer(buf, dtype=np.int16).copy())
    sf.write(wav, np.concatenate(audio), 8000, subtype="PCM_16")
    print(f"{wav}: {len(audio)} frames, {lost} concealed")


if __name__ == "__main__":
    main()
