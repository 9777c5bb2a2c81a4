#!/bin/sh
# usage: p95.sh URL N -> p50 p95 max (ms) of N sequential GETs, after one warm-up
url=$1; n=$2
curl -s -o /dev/null "$url"
for i in $(seq $n); do curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "$url"; done | python3 -c '
import sys
rows=[l.split() for l in sys.stdin]
bad=sum(1 for c,_ in rows if c!="200")
t=sorted(float(x)*1000 for _,x in rows)
print(f"n={len(t)} non200={bad} p50={t[len(t)//2]:.0f} p95={t[int(len(t)*0.95)-1]:.0f} max={t[-1]:.0f} ms")'
