#!/usr/bin/env python3
"""Summarise a sweep-*.tsv: PESQ vs Calliper MOS, mean |diff|, Spearman, and the Bpl that
would make the E-model match PESQ (after removing the no-loss offset).
usage: summarize.py sweep-linphone.tsv [pesq_field]"""
import json, re, sys
from scipy.stats import spearmanr
from scipy.optimize import brentq
field = sys.argv[2] if len(sys.argv) > 2 else "pesq"
rows, seen = [], set()
for l in open(sys.argv[1]):
    p = l.rstrip("\n").split("\t")
    if p[0] in seen: continue
    seen.add(p[0])
    m = re.search(field + r"=([0-9.]+)", l); c = json.loads(p[3] if field == "pesq" else p[4])
    rows.append((p[0], float(m.group(1)), c["mos"], c["loss_pct"], c["burst_ratio"]))
mos = lambda R: 1 + 0.035 * R + 7e-6 * R * (R - 60) * (100 - R)
Rof = lambda M: brentq(lambda R: mos(R) - M, 0, 100)
base = [r for r in rows if r[0] == "none"][0]
off = base[2] - base[1]
print(f"{'cond':8} {'loss%':>6} {'BR':>5} {'PESQ':>6} {'Calliper':>8} {'diff':>6} {'diff-off':>8} {'Bpl_fit':>7}")
for n, pq, cm, lp, br in rows:
    bpl = ""
    if lp > 0:
        ie = Rof(min(base[1] + 0, 4.49)) - Rof(pq)  # loss impairment relative to the no-loss PESQ
        # Ie_eff = 95 Ppl / (Ppl/BR + Bpl)  (Ie = 0 for G.711)
        bpl = f"{95 * lp / ie - lp / br:7.1f}" if ie > 0 else "  n/a"
    print(f"{n:8} {lp:6.2f} {br:5.2f} {pq:6.3f} {cm:8.3f} {cm - pq:6.3f} {cm - off - pq:8.3f} {bpl:>7}")
d = [abs(r[2] - r[1]) for r in rows]; d2 = [abs(r[2] - off - r[1]) for r in rows]
rho = spearmanr([r[1] for r in rows], [r[2] for r in rows]).statistic
print(f"mean |Calliper-PESQ| = {sum(d)/len(d):.3f}; after removing no-loss offset {off:.3f}: {sum(d2)/len(d2):.3f}; Spearman rho = {rho:.3f}; n = {len(rows)}")
