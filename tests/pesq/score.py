#!/usr/bin/env python3
"""PESQ (P.862 narrowband, MOS-LQO) of a baresip decode dump against the sent WAV.
usage: score.py REF.wav DEG.wav  -> prints JSON"""
import json, sys
import numpy as np, soundfile as sf
from scipy.signal import correlate
from pesq import pesq

ref, fr = sf.read(sys.argv[1], dtype="int16")
deg, fd = sf.read(sys.argv[2], dtype="int16")
assert fr == fd == 8000, (fr, fd)
r = ref.astype(np.float64); d = deg.astype(np.float64)
# coarse alignment: lag of the cross-correlation peak (deg starts `lag` samples after ref)
c = correlate(d, r, mode="full", method="fft")
lags = np.arange(len(c)) - (len(r) - 1)
ok = (lags >= -400) & (lags <= 4000)          # plausible: -50 ms .. +500 ms
lag = int(lags[ok][np.argmax(c[ok])])
if lag >= 0:
    d_al = d[lag:]
else:
    d_al = np.concatenate([np.zeros(-lag), d])
n = len(r)
d_al = d_al[:n]
if len(d_al) < n:
    d_al = np.concatenate([d_al, np.zeros(n - len(d_al))])
out = {
    "ref_s": len(r) / 8000, "deg_s": len(d) / 8000, "lag_samples": lag,
    "mos_lqo_aligned": round(float(pesq(8000, r.astype(np.float32), d_al.astype(np.float32), "nb")), 3),
    "mos_lqo_raw": round(float(pesq(8000, r.astype(np.float32), d.astype(np.float32), "nb")), 3),
}
print(json.dumps(out))
