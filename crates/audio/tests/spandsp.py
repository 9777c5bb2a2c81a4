#!/usr/bin/env python3
"""Reference outputs from spandsp (libspandsp.so.2) for tests/spandsp.rs.

Writes into DIR: ulaw.pcm and alaw.pcm (the 256 codes decoded), and for
G.722 at 64 kbit/s two inputs with spandsp's decoding of each:
speech-like.g722 (a signal of sines, sweeps and noise, encoded by spandsp)
and random.g722 (pseudo-random bytes, which drive every saturation), with
.pcm beside them. All samples are 16-bit little-endian.
"""
import ctypes, math, struct, sys

out = sys.argv[1]
lib = ctypes.CDLL("libspandsp.so.2")
lib.g711_init.restype = ctypes.c_void_p
lib.g711_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
lib.g722_encode_init.restype = ctypes.c_void_p
lib.g722_encode_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
lib.g722_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
lib.g722_decode_init.restype = ctypes.c_void_p
lib.g722_decode_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
lib.g722_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

def write(name, data):
    with open(f"{out}/{name}", "wb") as f:
        f.write(data)

for name, mode in (("alaw", 0), ("ulaw", 1)):
    s = lib.g711_init(None, mode)
    codes = bytes(range(256))
    amp = (ctypes.c_int16 * 256)()
    assert lib.g711_decode(s, amp, codes, 256) == 256
    write(f"{name}.pcm", struct.pack("<256h", *amp))

def g722_decode(codes):
    d = lib.g722_decode_init(None, 64000, 0)
    amp = (ctypes.c_int16 * (2 * len(codes)))()
    n = lib.g722_decode(d, amp, codes, len(codes))
    assert n == 2 * len(codes), n
    return struct.pack(f"<{n}h", *amp)

# Four seconds at 16 kHz: tones, a sweep, bursts of noise and loud clipping.
seed = 1
signal = []
for i in range(64000):
    t = i / 16000
    seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
    noise = (seed >> 16) / 32768 - 0.5
    v = 6000 * math.sin(2 * math.pi * 440 * t) + 3000 * math.sin(2 * math.pi * (300 + 1800 * t) * t)
    if 1.5 < t < 2.0:
        v += 20000 * noise
    if t > 3.5:
        v *= 4
    signal.append(max(-32768, min(32767, int(v))))
e = lib.g722_encode_init(None, 64000, 0)
pcm = (ctypes.c_int16 * len(signal))(*signal)
codes = (ctypes.c_uint8 * (len(signal) // 2))()
assert lib.g722_encode(e, codes, pcm, len(signal)) == len(signal) // 2
codes = bytes(codes)
write("speech-like.g722", codes)
write("speech-like.pcm", g722_decode(codes))

random = bytearray()
for i in range(32000):
    seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
    random.append((seed >> 16) & 0xFF)
write("random.g722", bytes(random))
write("random.pcm", g722_decode(bytes(random)))
