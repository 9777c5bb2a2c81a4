# Sourced by the namespace rigs (relay.sh, relay_path.sh, topology.sh).
# Defines:
#   namespaces NS...   makes the network namespaces, their loopback up; exits
#                      77 (skip) when the first cannot be made (needs root and
#                      CAP_SYS_ADMIN). When the script exits, the processes in
#                      `pids` and any left in those namespaces are stopped
#                      (TERM, then KILL) and the namespaces removed.
#   ipa NS CMD...      runs CMD in NS.
#   link NS1 DEV1 ADDR1 NS2 DEV2 ADDR2
#                      a veth pair between NS1 and NS2, addressed (ADDR with
#                      its prefix length) and up.
#   pids               the processes to stop at the end (append to it).
pids=()
made=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for n in "${made[@]}"; do ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
    sleep 0.2
    # What did not stop on TERM is killed, so no namespace is left behind.
    for n in "${made[@]}"; do ip netns pids "$n" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true; done
    for n in "${made[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
ipa() { ip netns exec "$1" "${@:2}"; }
namespaces() {
    made=("$@")
    if ! ip netns add "$1" 2>/dev/null; then
        echo "SKIP: cannot create network namespaces here (needs root and CAP_SYS_ADMIN)"
        exit 77
    fi
    local n
    for n in "${@:2}"; do ip netns add "$n"; done
    for n in "$@"; do ipa "$n" ip link set lo up; done
}
link() {
    ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
    ipa "$1" ip addr add "$3" dev "$2"
    ipa "$4" ip addr add "$6" dev "$5"
    ipa "$1" ip link set "$2" up
    ipa "$4" ip link set "$5" up
}
