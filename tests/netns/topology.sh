# Sourced by the namespace rigs (run.sh, media_relay.sh, edge_overlay.sh): with A, B and P
# naming three namespaces, builds
#
#   A 10.90.1.2 (a0) ── (pa) 10.90.1.1  P  10.90.2.1 (pb) ── (b0) 10.90.2.2 B
#
# with default routes through P, defines `ipa NS CMD...` and `pids` (killed,
# with P's processes, when the script exits, before the namespaces go).
# Exits 77 (skip) when namespaces cannot be created.
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ip netns pids "$P" 2>/dev/null | xargs -r kill 2>/dev/null || true
    sleep 0.2
    for n in "$A" "$B" "$P"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
if ! ip netns add "$A" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (needs root and CAP_SYS_ADMIN)"
    exit 77
fi
ip netns add "$B"
ip netns add "$P"
ip link add a0 netns "$A" type veth peer name pa netns "$P"
ip link add b0 netns "$B" type veth peer name pb netns "$P"
ipa() { ip netns exec "$1" "${@:2}"; }
ipa "$A" ip addr add 10.90.1.2/24 dev a0
ipa "$P" ip addr add 10.90.1.1/24 dev pa
ipa "$B" ip addr add 10.90.2.2/24 dev b0
ipa "$P" ip addr add 10.90.2.1/24 dev pb
for n in "$A" "$B" "$P"; do ipa "$n" ip link set lo up; done
ipa "$A" ip link set a0 up
ipa "$B" ip link set b0 up
ipa "$P" ip link set pa up
ipa "$P" ip link set pb up
ipa "$A" ip route add default via 10.90.1.1
ipa "$B" ip route add default via 10.90.2.1

# sipp_calls CALLS LOG...: CALLS SIPp calls from the caller in A (UDP, to the
# proxy at 10.90.1.1) to the callee in B (TCP), both playing G.711, logs in
# $out; on failure prints SIPp's logs and the tails of LOG... and exits 1.
# Needs $here (the scenarios) and $out.
sipp_calls() {
    local calls=$1 uas
    shift
    ipa "$B" sipp -sf "$here/uas.xml" -t t1 -i 10.90.2.2 -p 5060 -mi 10.90.2.2 -mp 20000 \
        -m "$calls" -nostdin -trace_err -error_file "$out/uas-errors.log" >"$out/uas.log" 2>&1 &
    uas=$!
    pids+=($uas)
    sleep 0.5
    ipa "$A" sipp -sf "$here/uac.xml" -t u1 -i 10.90.1.2 -p 5060 -mi 10.90.1.2 -mp 30000 \
        -m "$calls" -l "$calls" -r 10 -nostdin -trace_err -error_file "$out/uac-errors.log" \
        10.90.1.1:5060 >"$out/uac.log" 2>&1 || {
        echo "caller SIPp failed:"
        tail -20 "$out/uac.log" "$out"/uac-errors.log "$@" 2>/dev/null
        exit 1
    }
    wait "$uas" || { echo "callee SIPp failed:"; tail -20 "$out/uas.log"; exit 1; }
}
