#!/usr/bin/env python3
"""Print Calliper's view of the caller->callee stream: loss, burst ratio, MOS, jitter buffer models.
usage: calliper_mos.py calliper.jsonl"""
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get("type") != "call": continue
    for s in o["streams"]:
        if s["direction"] != "caller_to_callee": continue
        print(json.dumps({"lost": s["lost"], "expected": s["expected"], "loss_pct": round(s["loss_percent"], 2),
            "burst_ratio": round(s["burst_ratio"], 3), "r": round(s["r_factor"], 2), "mos": round(s["mos"], 3),
            "jb": {j["model"]: round(j["mos"], 3) for j in s["jitter_buffers"]}}))
