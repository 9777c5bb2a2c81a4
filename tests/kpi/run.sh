#!/usr/bin/env bash
# SIPp calls with failures for the KPI test, in a network namespace of
# their own (loopback only): a caller asks a callee for the outcome each
# line of the injection file names (200, 486, 503 or 408), and tcpdump
# captures the signalling. Writes to OUT:
#   kpi.pcap          the capture
#   uac_*_counts.csv  SIPp's message counts per scenario step (-trace_counts)
#   uac_*_rtt.csv     SIPp's response times: 1 = SRD, 2 = SDD (-trace_rtt)
#
# usage: tests/kpi/run.sh OUT [CALLS]
# Exits 77 (skip) only when a network namespace cannot be created.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
calls=${2:-40}
ns=cal-kpi-$$
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.2
    ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
if ! ip netns add "$ns" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (needs root and CAP_SYS_ADMIN)"
    exit 77
fi
in_ns() { ip netns exec "$ns" "$@"; }
in_ns ip link set lo up
# Outcomes: half answered, the rest busy, unavailable and timed out.
{
    echo SEQUENTIAL
    for i in $(seq 1 "$calls"); do
        case $((i % 10)) in
            1 | 2) echo "486;" ;;
            3 | 4) echo "503;" ;;
            5) echo "408;" ;;
            *) echo "200;" ;;
        esac
    done
} >"$out/outcomes.csv"
ip netns exec "$ns" tcpdump -i lo -U -s 0 --time-stamp-precision=nano -w "$out/kpi.pcap" \
    'udp port 5060 or udp port 5070' 2>"$out/tcpdump.log" &
tcpdump=$!
pids+=($tcpdump)
sleep 1
cd "$out"
ip netns exec "$ns" sipp -sf "$here/uas.xml" -i 127.0.0.1 -p 5070 -m "$calls" -nostdin \
    -trace_err -error_file "$out/uas-errors.log" >"$out/uas.log" 2>&1 &
uas=$!
pids+=($uas)
sleep 0.5
in_ns sipp -sf "$here/uac.xml" -i 127.0.0.1 -p 5060 -inf "$out/outcomes.csv" \
    -m "$calls" -l 10 -r 20 -nostdin -trace_counts -trace_rtt -rtt_freq 1 \
    -trace_err -error_file "$out/uac-errors.log" 127.0.0.1:5070 >"$out/uac.log" 2>&1 ||
    { echo "caller SIPp failed:"; tail -20 "$out/uac.log" "$out/uac-errors.log" 2>/dev/null; exit 1; }
wait "$uas" || { echo "callee SIPp failed:"; tail -20 "$out/uas.log" "$out/uas-errors.log" 2>/dev/null; exit 1; }
# Let tcpdump write the last packets and close the file.
sleep 1
kill -INT "$tcpdump"
wait "$tcpdump" || true
