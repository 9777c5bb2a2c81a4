#!/usr/bin/env python3
"""Gilbert-Elliott (or Bernoulli) RTP dropper on NFQUEUE, run in the middle namespace.
Decisions are per RTP packet index (seq - first seq, mod 2^16), drawn from a seeded
pattern, so a condition is reproducible and the drop list is exact ground truth.

  ge_dropper.py --queue 0 --p 0.02 --r 0.3 [--h 0] [--k 1] --seed 1 --log drops.json
    p = P(good->bad), r = P(bad->good), loss in bad = 1-h, loss in good = 1-k.
    Mean loss (h=0,k=1) = p/(p+r); mean burst length = 1/r.
  ge_dropper.py --bernoulli 0.05 ...   plain random loss
  ge_dropper.py --any ...   every packet of the queue in turn, whatever it
    carries (a relay link's datagrams), instead of RTP by sequence number
Stops on SIGTERM/SIGINT and writes the log."""
import argparse, json, random, signal, sys
from netfilterqueue import NetfilterQueue

ap = argparse.ArgumentParser()
ap.add_argument("--queue", type=int, default=0)
ap.add_argument("--p", type=float, default=0.0)
ap.add_argument("--r", type=float, default=1.0)
ap.add_argument("--h", type=float, default=0.0)
ap.add_argument("--k", type=float, default=1.0)
ap.add_argument("--bernoulli", type=float, default=None)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--skip", type=int, default=5, help="never drop the first N packets")
ap.add_argument("--log", default="drops.json")
ap.add_argument("--any", action="store_true", help="drop by the queue's packet count, not RTP")
a = ap.parse_args()

rng = random.Random(a.seed)
N = 1 << 16
pattern, bad = [], False
for i in range(N):
    if a.bernoulli is not None:
        drop = rng.random() < a.bernoulli
    else:
        drop = rng.random() >= (a.h if bad else a.k)
        bad = (rng.random() >= a.r) if bad else (rng.random() < a.p)
    pattern.append(drop and i >= a.skip)

first = {}     # ssrc -> first seq
stats = {"seen": 0, "dropped": 0, "dropped_idx": []}

def decide(pkt, idx):
    """Drops or passes the packet at pattern index idx, and counts it."""
    stats["seen"] += 1
    if pattern[idx]:
        stats["dropped"] += 1; stats["dropped_idx"].append(idx)
        pkt.drop()
    else:
        pkt.accept()

def cb_any(pkt):
    decide(pkt, stats["seen"] % N)

def cb(pkt):
    raw = pkt.get_payload()
    ihl = (raw[0] & 0x0F) * 4
    rtp = raw[ihl + 8:]
    if len(rtp) < 12 or rtp[0] >> 6 != 2 or rtp[1] >= 200:   # not RTP (or RTCP)
        pkt.accept(); return
    seq = int.from_bytes(rtp[2:4], "big"); ssrc = rtp[8:12]
    f = first.setdefault(ssrc, seq)
    decide(pkt, (seq - f) % N)

nfq = NetfilterQueue()
nfq.bind(a.queue, cb_any if a.any else cb)
def stop(*_):
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, stop)
try:
    nfq.run()
except KeyboardInterrupt:
    pass
finally:
    nfq.unbind()
    stats["loss_pct"] = round(100 * stats["dropped"] / max(1, stats["seen"]), 2)
    idx = stats["dropped_idx"]
    bursts = []
    for i in idx:
        if bursts and i == bursts[-1][1] + 1: bursts[-1][1] = i
        else: bursts.append([i, i])
    stats["bursts"] = len(bursts)
    stats["mean_burst"] = round(len(idx) / max(1, len(bursts)), 2)
    json.dump(stats, open(a.log, "w"))
    print(json.dumps({k: v for k, v in stats.items() if k != "dropped_idx"}), file=sys.stderr)
