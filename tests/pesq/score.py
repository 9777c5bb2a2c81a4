#!/usr/bin/env python3
"""PESQ (ITU-T P.862 narrowband, P.862.1 MOS-LQO) of what a receiver played
against the speech sent, printed to three decimals.

The received audio starts later than the speech (call set-up, jitter buffer:
linphonec records 60-95 ms late), so it is first shifted by the lag of the
cross-correlation peak, searched from -50 to +500 ms, and cut to the
speech's length; PESQ then aligns each utterance itself.

usage: score.py SENT.wav RECEIVED.wav
"""
import sys

import numpy as np
import soundfile as sf
from pesq import pesq
from scipy.signal import correlate

RATE = 8000


def main():
    sent, rate_sent = sf.read(sys.argv[1], dtype="int16")
    received, rate_received = sf.read(sys.argv[2], dtype="int16")
    if rate_sent != RATE or rate_received != RATE:
        sys.exit(f"score.py: both files must be {RATE} Hz (got {rate_sent}, {rate_received})")
    ref = sent.astype(np.float64)
    deg = received.astype(np.float64)
    c = correlate(deg, ref, mode="full", method="fft")
    lags = np.arange(len(c)) - (len(ref) - 1)
    plausible = (lags >= -RATE // 20) & (lags <= RATE // 2)
    lag = int(lags[plausible][np.argmax(c[plausible])])
    if lag in (-RATE // 20, RATE // 2):
        sys.exit(f"score.py: no alignment found ({lag} samples, the edge of the search)")
    deg = deg[lag:] if lag >= 0 else np.concatenate([np.zeros(-lag), deg])
    deg = np.concatenate([deg[: len(ref)], np.zeros(max(0, len(ref) - len(deg)))])
    score = pesq(RATE, ref.astype(np.float32), deg.astype(np.float32), "nb")
    print(f"{score:.3f}")


if __name__ == "__main__":
    main()
