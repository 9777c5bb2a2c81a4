# Sourced by the namespace rigs (run.sh, media_relay.sh, edge_overlay.sh): with A, B and P
# naming three namespaces, builds
#
#   A 10.90.1.2 (a0) ── (pa) 10.90.1.1  P  10.90.2.1 (pb) ── (b0) 10.90.2.2 B
#
# with default routes through P, defines `ipa NS CMD...`, `sipp_calls` (sipp_calls.sh), `await_line` (ready.sh) and `pids` (killed,
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

. "$here/sipp_calls.sh"
. "$here/ready.sh"
