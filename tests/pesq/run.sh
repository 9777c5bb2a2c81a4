#!/usr/bin/env bash
# Calliper's MOS against listening quality (PESQ, ITU-T P.862): linphonec
# calls carry speech from pq-a to pq-b through pq-m, which drops the RTP at
# 13 conditions (0-10 %, random and bursty), each with several seeds. The
# speech each receiver plays out is scored with PESQ against what was sent,
# for two receivers of the same packets:
#   linphone  linphonec's own recording (adaptive jitter buffer, its PLC)
#   spandsp   the received packets decoded with spandsp's PLC (plc_decode.py)
# and Calliper analyses the callee's capture of the same call, and exports
# its audio (`calliper export audio`, the caller's side), scored too.
#
#   sudo tests/pesq/run.sh OUT [SEEDS [CONDITION...]]
#       SEEDS: calls per lossy condition, 3 by default; CONDITIONs: names
#       from the list below (none r1 ... g10b2), all by default.
#
# Writes OUT/results.tsv (one row per call) and, through summarize.py,
# OUT/table.md and OUT/plot.svg. Needs root (namespaces, iptables), and:
#   apt-get install linphone-cli espeak-ng sox iptables tcpdump libnetfilter-queue-dev libspandsp2
#   pip install pesq numpy scipy soundfile netfilterqueue
# CALLIPER names the binary (default: target/release/calliper). CODEC
# (PCMU by default, G722, opus) is the codec of the calls; spandsp's
# decoding is G.711's only, so with another its column is "-".
# About 45 s per call: 39 calls, 30 minutes, with 3 seeds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { sed -n '2,18p' "$0"; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
seeds=${2:-3}
only=("${@:3}")
calliper=${CALLIPER:-$root/target/release/calliper}

# 77: namespaces cannot be made here (the tests' convention for "skip if asked").
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root for network namespaces and iptables" >&2; exit 77; }
missing=()
for tool in linphonec espeak-ng sox soxi iptables tcpdump ip python3; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
python3 -c "import pesq, numpy, scipy, soundfile, netfilterqueue" 2>/dev/null ||
    missing+=("python modules (pip install pesq numpy scipy soundfile netfilterqueue)")
python3 -c "import ctypes.util, sys; sys.exit(not ctypes.util.find_library('spandsp'))" ||
    missing+=("libspandsp2")
[ -x "$calliper" ] || missing+=("$calliper (cargo build --release, or set CALLIPER)")
if [ ${#missing[@]} -gt 0 ]; then
    printf 'run.sh: missing: %s\n' "${missing[@]}" >&2
    exit 1
fi

# Speech: four Harvard sentences, telephone band, 8 kHz, level -3 dBFS peak.
"$here/sentences.sh" "$out"
sox -n -r 8000 -c 1 -b 16 "$out/silence.wav" trim 0 30
# The ceiling: the speech through mu-law and back, no network at all.
sox "$out/speech.wav" -e u-law "$out/speech-ulaw.wav"
sox "$out/speech-ulaw.wav" -e signed-integer -b 16 "$out/speech-g711.wav"
echo "PESQ of the speech through G.711 alone: $(python3 "$here/score.py" "$out/speech.wav" "$out/speech-g711.wav")" |
    tee "$out/ceiling.txt"

# Namespaces: pq-a 10.77.1.2 -- 10.77.1.1 pq-m 10.77.2.1 -- 10.77.2.2 pq-b
cleanup() {
    for n in pq-a pq-m pq-b; do
        ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$n" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap "exit 1" INT TERM
cleanup
ip netns add pq-a || exit 77
for n in pq-m pq-b; do ip netns add "$n"; done
for n in pq-a pq-m pq-b; do ip -n "$n" link set lo up; done
ip link add a0 netns pq-a type veth peer name pa netns pq-m
ip link add b0 netns pq-b type veth peer name pb netns pq-m
ip -n pq-a addr add 10.77.1.2/24 dev a0
ip -n pq-m addr add 10.77.1.1/24 dev pa
ip -n pq-m addr add 10.77.2.1/24 dev pb
ip -n pq-b addr add 10.77.2.2/24 dev b0
for l in "pq-a a0" "pq-m pa" "pq-m pb" "pq-b b0"; do set -- $l; ip -n "$1" link set "$2" up; done
ip -n pq-a route add default via 10.77.1.1
ip -n pq-b route add default via 10.77.2.1
ip netns exec pq-m sysctl -qw net.ipv4.ip_forward=1

# name, loss mode, loss %, mean burst (packets). Gilbert: r = 1/burst, p = r*loss/(1-loss).
conditions=(
    "none none 0 0"
    "r1 bern 1 1" "r2 bern 2 1" "r3 bern 3 1" "r5 bern 5 1" "r7 bern 7 1" "r10 bern 10 1"
    "g2b2 ge 2 2" "g5b2 ge 5 2" "g5b3 ge 5 3" "g8b3 ge 8 3" "g10b4 ge 10 4" "g10b2 ge 10 2"
)
printf 'condition\tmode\tloss_target\tburst_target\tseed\tdropped\tdropped_after_last\tcalliper_lost\tcalliper_loss\tburst_ratio\tcalliper_mos\tpesq_linphone\tpesq_spandsp\tpesq_export\n' >"$out/results.tsv"
for c in "${conditions[@]}"; do
    set -- $c
    name=$1 mode=$2 loss=$3 burst=$4
    [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $name "* ]] || continue
    for seed in $(seq 1 "$seeds"); do
        dir=$out/calls/$name-$seed
        # Each condition and seed draws its own pattern: seed 1 of every
        # condition would otherwise share one draw, and the conditions correlate.
        pattern=$(cksum <<<"$name-$seed" | cut -d' ' -f1)
        case $mode in
        none) args=(none) ;;
        bern) args=(bern "$(awk "BEGIN{print $loss/100}")" "$pattern") ;;
        ge) args=(ge "$(awk "BEGIN{r=1/$burst; l=$loss/100; print r*l/(1-l)}")" "$(awk "BEGIN{print 1/$burst}")" "$pattern") ;;
        esac
        "$here/call.sh" "$dir" "$out/speech.wav" "$out/silence.wav" "${args[@]}"
        # PESQ here is narrowband: wideband receivers are heard at 8 kHz.
        sox "$dir/rec.wav" "$dir/rec-8k.wav" rate 8000
        linphone=$(python3 "$here/score.py" "$out/speech.wav" "$dir/rec-8k.wav")
        spandsp=-
        if [ "${CODEC:-PCMU}" = PCMU ]; then
            python3 "$here/plc_decode.py" "$dir/callee.pcap" 10.77.1.2 "$dir/spandsp.wav" >/dev/null
            spandsp=$(python3 "$here/score.py" "$out/speech.wav" "$dir/spandsp.wav")
        fi
        "$calliper" analyze --progress never --format jsonl -o "$dir/calliper.jsonl" --db "$dir/calls.db" "$dir/callee.pcap"
        call_id=$(python3 -c 'import json, sys; print(next(o["call_id"] for l in open(sys.argv[1]) for o in [json.loads(l)] if o["type"] == "call"))' "$dir/calliper.jsonl")
        # A Call-ID may start with "-": after "--" it is not taken for an option.
        "$calliper" export audio --db "$dir/calls.db" --pcap "$dir/callee.pcap" -o "$dir/export.wav" -- "$call_id" 2>"$dir/export.log"
        sox "$dir/export.wav" "$dir/export-caller.wav" remix 1 rate 8000
        exported=$(python3 "$here/score.py" "$out/speech.wav" "$dir/export-caller.wav")
        # Dropped, and of those how many after the last packet that arrived
        # (nobody downstream can count those).
        dropped="0	0"
        [ "$mode" = none ] || dropped=$(python3 - "$dir/drops.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
dropped, trailing = set(d["dropped_idx"]), 0
while d["seen"] - 1 - trailing in dropped:
    trailing += 1
print(f"{d['dropped']}\t{trailing}")
EOF
)
        stream=$(python3 - "$dir/calliper.jsonl" <<'EOF'
import json, sys
streams = [s for l in open(sys.argv[1]) for o in [json.loads(l)] if o["type"] == "call"
           for s in o["streams"] if s["direction"] == "caller_to_callee"]
assert len(streams) == 1, f"expected one caller stream, found {len(streams)}"
s = streams[0]
mos = "-" if s["mos"] is None else f"{s['mos']:.3f}"  # no E-model values for the codec
print(f"{s['lost']}\t{s['loss_percent']:.3f}\t{s['burst_ratio']:.3f}\t{mos}")
EOF
)
        row="$name	$mode	$loss	$burst	$seed	$dropped	$stream	$linphone	$spandsp	$exported"
        echo "$row" >>"$out/results.tsv"
        echo "$row"
    done
done
# The table and plot set Calliper's G.711 MOS against PESQ.
[ "${CODEC:-PCMU}" != PCMU ] || python3 "$here/summarize.py" "$out/results.tsv" "$out"
