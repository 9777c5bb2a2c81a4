#!/usr/bin/env python3
"""Summarise run.sh's results.tsv: per condition (mean over seeds) the loss,
Calliper's MOS and each receiver's PESQ, raw and on the E-model's scale;
mean differences, Spearman's rho, the Bpl that PESQ implies; a Markdown
table (OUT/table.md) and a plot (OUT/plot.svg).

PESQ's scale is not the E-model's: a perfect G.711 channel scores about 4.1
with this speech (the MOS-LQO of the speech through a mu-law round trip),
where the E-model gives 4.4. As ITU-T P.834 does to derive impairment
factors from PESQ, the comparison is made on the R scale: the impairment
PESQ sees is Ie,eff = R(PESQ without loss) - R(PESQ with loss), and the
PESQ-derived MOS is MOS(R(Calliper without loss) - Ie,eff), with G.107's
R-to-MOS curve both ways.

usage: summarize.py results.tsv OUT_DIR
"""
import csv
import os
import sys
from statistics import mean

from scipy.optimize import brentq, minimize_scalar
from scipy.stats import spearmanr

RECEIVERS = ("linphone", "spandsp")
TARGET = 0.3


def mos_of_r(r):
    """G.107 Annex B."""
    if r <= 0:
        return 1.0
    if r >= 100:
        return 4.5
    return 1 + 0.035 * r + 7e-6 * r * (r - 60) * (100 - r)


def r_of_mos(m):
    return brentq(lambda r: mos_of_r(r) - m, 0, 100)


def conditions(path):
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    names = list(dict.fromkeys(r["condition"] for r in rows))
    out = []
    for name in names:
        calls = [r for r in rows if r["condition"] == name]
        f = lambda key: mean(float(r[key]) for r in calls)
        out.append({
            "name": name, "mode": calls[0]["mode"], "calls": len(calls),
            "loss": f("calliper_loss"), "burst_ratio": f("burst_ratio"),
            "calliper": f("calliper_mos"),
            **{rx: f(f"pesq_{rx}") for rx in RECEIVERS},
        })
    return out


def derive(conds):
    """Adds ie_<rx> and derived_<rx> to each condition; returns the fitted Bpl per receiver."""
    clean = next(c for c in conds if c["mode"] == "none")
    r_cal_clean = r_of_mos(clean["calliper"])
    for c in conds:
        c["ie_calliper"] = r_cal_clean - r_of_mos(c["calliper"])
    bpl = {}
    for rx in RECEIVERS:
        r_clean = r_of_mos(clean[rx])
        for c in conds:
            c[f"ie_{rx}"] = r_clean - r_of_mos(c[rx])
            c[f"derived_{rx}"] = mos_of_r(r_cal_clean - c[f"ie_{rx}"])
        lossy = [c for c in conds if c["loss"] > 0]

        def error(b):
            return sum((95 * c["loss"] / (c["loss"] / c["burst_ratio"] + b) - c[f"ie_{rx}"]) ** 2 for c in lossy)

        bpl[rx] = minimize_scalar(error, bounds=(1, 60), method="bounded").x
    return bpl


def summary(conds, rx):
    """Over the lossy conditions: the no-loss one is the anchor, equal by construction."""
    lossy = [c for c in conds if c["mode"] != "none"]
    diffs = [c["calliper"] - c[f"derived_{rx}"] for c in lossy]
    raw = [c["calliper"] - c[rx] for c in lossy]
    rho = spearmanr([c["calliper"] for c in lossy], [c[rx] for c in lossy]).statistic
    return {
        "mean_abs": mean(abs(d) for d in diffs), "mean": mean(diffs),
        "worst": max(diffs, key=abs), "over": sum(abs(d) > TARGET for d in diffs), "n": len(diffs),
        "raw_mean_abs": mean(abs(d) for d in raw), "rho": rho,
    }


def table(conds, bpl, sums):
    lines = [
        "| condition | calls | loss % | BurstR | Calliper MOS | Calliper Ie,eff | PESQ linphone | linphone Ie,eff | derived | diff | PESQ spandsp | spandsp Ie,eff | derived | diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in conds:
        name = c["name"] + (" (anchor)" if c["mode"] == "none" else "")
        cells = [name, str(c["calls"]), f"{c['loss']:.2f}", f"{c['burst_ratio']:.2f}", f"{c['calliper']:.2f}",
                 f"{c['ie_calliper']:.1f}"]
        for rx in RECEIVERS:
            cells += [f"{c[rx]:.2f}", f"{c[f'ie_{rx}']:.1f}", f"{c[f'derived_{rx}']:.2f}",
                      f"{c['calliper'] - c[f'derived_{rx}']:+.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for rx in RECEIVERS:
        s = sums[rx]
        lines.append(
            f"- **{rx}**, over the {s['n']} lossy conditions: mean |Calliper - derived| {s['mean_abs']:.2f} "
            f"(signed {s['mean']:+.2f}, worst {s['worst']:+.2f}, {s['over']} above {TARGET}); "
            f"against raw PESQ {s['raw_mean_abs']:.2f}; Spearman rho {s['rho']:.3f}; "
            f"PESQ implies G.711 Bpl {bpl[rx]:.1f} (Calliper: 25.1)"
        )
    return "\n".join(lines) + "\n"


def plot(conds, sums):
    """Calliper's MOS against the PESQ-derived MOS, one point per condition and receiver."""
    size, pad, lo, hi = 420, 50, 2.0, 4.6
    px = lambda v: pad + (v - lo) / (hi - lo) * (size - 2 * pad)
    py = lambda v: size - px(v)
    colours = {"linphone": "#1f77b4", "spandsp": "#d62728"}
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" font-family="sans-serif" font-size="11">',
           f'<rect width="{size}" height="{size}" fill="white"/>']
    band = [(lo, lo + TARGET), (hi - TARGET, hi), (hi, hi - TARGET), (lo + TARGET, lo)]
    svg.append('<polygon fill="#eeeeee" points="' + " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in band) + '"/>')
    svg.append(f'<line x1="{px(lo)}" y1="{py(lo)}" x2="{px(hi)}" y2="{py(hi)}" stroke="#888"/>')
    for v in (2.0, 2.5, 3.0, 3.5, 4.0, 4.5):
        svg.append(f'<text x="{px(v):.1f}" y="{size - pad + 15}" text-anchor="middle">{v}</text>')
        svg.append(f'<text x="{pad - 8}" y="{py(v) + 4:.1f}" text-anchor="end">{v}</text>')
    svg.append(f'<rect x="{pad}" y="{pad}" width="{size - 2 * pad}" height="{size - 2 * pad}" fill="none" stroke="black"/>')
    svg.append(f'<text x="{size / 2}" y="{size - 12}" text-anchor="middle">PESQ-derived MOS (P.862, on the E-model scale)</text>')
    svg.append(f'<text x="14" y="{size / 2}" text-anchor="middle" transform="rotate(-90 14 {size / 2})">Calliper MOS (adaptive buffer)</text>')
    for i, rx in enumerate(RECEIVERS):
        for c in conds:
            if c["mode"] == "none":
                continue
            shape = "circle" if c["mode"] != "ge" else "rect"
            x, y = px(c[f"derived_{rx}"]), py(c["calliper"])
            if shape == "circle":
                svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colours[rx]}"/>')
            else:
                svg.append(f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="none" stroke="{colours[rx]}" stroke-width="1.5"/>')
        svg.append(f'<text x="{pad + 8}" y="{pad + 16 + 14 * i}" fill="{colours[rx]}">{rx}: mean |diff| {sums[rx]["mean_abs"]:.2f}</text>')
    svg.append(f'<text x="{pad + 8}" y="{pad + 16 + 28}">dots random loss, squares bursty; grey ±{TARGET}</text>')
    svg.append(f'<text x="{pad + 8}" y="{pad + 16 + 42}">(lossy conditions; no loss is the anchor)</text>')
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def main():
    path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    conds = conditions(path)
    bpl = derive(conds)
    sums = {rx: summary(conds, rx) for rx in RECEIVERS}
    text = table(conds, bpl, sums)
    open(os.path.join(out, "table.md"), "w").write(text)
    open(os.path.join(out, "plot.svg"), "w").write(plot(conds, sums))
    print(text, end="")


if __name__ == "__main__":
    main()
