#!/usr/bin/env bash
# usage: [EP=baresip|linphone] sweep.sh ["name mode args..." ...]
# Runs conditions, scores PESQ (P.862 nb MOS-LQO), runs calliper. Appends to sweep-$EP.tsv
cd "$(dirname "$0")"
EP=${EP:-baresip}
CAL=/work/main/target/release/calliper
conds=("none none" "r1 random 1" "r2 random 2" "r5 random 5" "r10 random 10"
       "b2 bern 2 7" "b5 bern 5 7" "ge2b2 ge 0.0102 0.5 3" "ge5b3 ge 0.01754 0.3333 1" "ge10b4 ge 0.02778 0.25 2")
[ $# -gt 0 ] && conds=("$@")
for c in "${conds[@]}"; do
  set -- $c; name=$1; shift
  if [ $EP = baresip ]; then
    d=runs/$name; ./run-call.sh $d "$@" >/dev/null 2>$d.err || { echo "$name failed"; continue; }
    dec=$(python3 score.py speech8k.wav $d/dec.wav | python3 -c "import json,sys;print(json.load(sys.stdin)['mos_lqo_raw'])")
    play=$(python3 score.py speech8k.wav $d/callee-enc.wav | python3 -c "import json,sys;print(json.load(sys.stdin)['mos_lqo_raw'])")
    pesq="pesq_dec=$dec	pesq_playout=$play"
  else
    d=lruns/$name; mkdir -p lruns; ./run-linphone.sh $d "$@" >/dev/null 2>$d.err || { echo "$name failed"; continue; }
    pesq="pesq=$(python3 score.py speech8k.wav $d/rec.wav | python3 -c "import json,sys;j=json.load(sys.stdin);print(j['mos_lqo_aligned'],'lag',j['lag_samples'])")"
  fi
  $CAL analyze --format jsonl $d/callee.pcap > $d/calliper.jsonl 2>/dev/null
  cal=$(python3 calliper_mos.py $d/calliper.jsonl)
  drops=$(cat $d/dropper.log 2>/dev/null | tr -d '\n')
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$*" "$pesq" "$cal" "$drops" | tee -a sweep-$EP.tsv
done
