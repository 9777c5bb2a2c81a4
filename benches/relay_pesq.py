#!/usr/bin/env python3
"""The table and plots of benches/relay_pesq.sh: PESQ MOS-LQO of each mode
against the loss per hop, with Calliper's MOS of the same stream (a plot
per number of hops, random loss).

usage: relay_pesq.py RESULTS.tsv CEILING OUT_DIR
"""
import csv
import sys

MODES = [("rtpengine", "#c0392b"), ("no-recovery", "#e67e22"), ("overlay", "#2471a3")]


def load(path):
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    for r in rows:
        r["loss"] = float(r["loss_per_hop"])
        r["hops"] = int(r["hops"])
        r["burst"] = int(r["burst"])
        r["pesq"] = float(r["pesq"])
        r["calliper_mos"] = float(r["calliper_mos"])
        r["received_loss"] = 100.0 * (1 - int(r["received"]) / int(r["sent"]))
    return rows


def table(rows, ceiling):
    out = [
        f"PESQ of the speech through G.711 alone (no network): {ceiling}",
        "",
        "| hops | loss per hop | mode | received loss | PESQ MOS-LQO | Calliper MOS |",
        "|---|---|---|---|---|---|",
    ]
    order = [m for m, _ in MODES]
    for r in sorted(rows, key=lambda r: (r["hops"], r["burst"], r["loss"], order.index(r["mode"]))):
        loss = f"{r['loss']:g} %" + (f", bursts of {r['burst']}" if r["burst"] > 1 else "")
        out.append(
            f"| {r['hops']} | {loss} | {r['mode']} | {r['received_loss']:.2f} % "
            f"| {r['pesq']:.2f} | {r['calliper_mos']:.2f} |"
        )
    return "\n".join(out) + "\n"


def plot(rows, hops):
    rows = [r for r in rows if r["hops"] == hops and r["burst"] == 1]
    w, h, left, bottom, top, right = 560, 360, 60, 50, 20, 150
    losses = sorted({r["loss"] for r in rows})
    x_max = max(losses) or 1.0
    x = lambda v: left + (w - left - right) * v / x_max
    y = lambda v: h - bottom - (h - bottom - top) * (v - 1.0) / 3.5
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for m in (1.0, 2.0, 3.0, 4.0, 4.5):
        svg.append(f'<line x1="{left}" y1="{y(m):.1f}" x2="{w - right}" y2="{y(m):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 8}" y="{y(m) + 4:.1f}" text-anchor="end">{m:g}</text>')
    for v in losses:
        svg.append(f'<text x="{x(v):.1f}" y="{h - bottom + 18}" text-anchor="middle">{v:g}</text>')
    svg.append(f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">loss per hop, % ({hops} lossy hops each way, random)</text>')
    svg.append(f'<text x="15" y="{(h - bottom) / 2}" transform="rotate(-90 15 {(h - bottom) / 2})" text-anchor="middle">MOS</text>')
    for i, (mode, colour) in enumerate(MODES):
        pts = sorted((r["loss"], r["pesq"], r["calliper_mos"]) for r in rows if r["mode"] == mode)
        if not pts:
            continue
        pesq_line = " ".join(f"{x(l):.1f},{y(p):.1f}" for l, p, _ in pts)
        est_line = " ".join(f"{x(l):.1f},{y(c):.1f}" for l, _, c in pts)
        svg.append(f'<polyline points="{pesq_line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        svg.append(f'<polyline points="{est_line}" fill="none" stroke="{colour}" stroke-width="1" stroke-dasharray="4 3"/>')
        ly = top + 16 * i
        svg.append(f'<line x1="{w - right + 10}" y1="{ly + 6}" x2="{w - right + 30}" y2="{ly + 6}" stroke="{colour}" stroke-width="2"/>')
        svg.append(f'<text x="{w - right + 35}" y="{ly + 10}">{mode}</text>')
    ly = top + 16 * len(MODES) + 8
    svg.append(f'<text x="{w - right + 10}" y="{ly + 10}">solid: PESQ</text>')
    svg.append(f'<text x="{w - right + 10}" y="{ly + 26}">dashed: Calliper</text>')
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def main():
    results, ceiling, out = sys.argv[1:4]
    rows = load(results)
    open(f"{out}/table.md", "w").write(table(rows, ceiling))
    for hops in sorted({r["hops"] for r in rows if r["burst"] == 1}):
        open(f"{out}/plot-{hops}hops.svg", "w").write(plot(rows, hops))
    print(table(rows, ceiling))


if __name__ == "__main__":
    main()
