#!/usr/bin/env bash
# caller pq-a 10.77.1.2 -- 10.77.1.1 pq-m 10.77.2.1 -- 10.77.2.2 pq-b callee
set -euo pipefail
for n in pq-a pq-m pq-b; do ip netns del $n 2>/dev/null || true; done
ip netns add pq-a; ip netns add pq-m; ip netns add pq-b
ip link add a0 netns pq-a type veth peer name pa netns pq-m
ip link add b0 netns pq-b type veth peer name pb netns pq-m
x() { ip netns exec "$@"; }
x pq-a ip addr add 10.77.1.2/24 dev a0
x pq-m ip addr add 10.77.1.1/24 dev pa
x pq-m ip addr add 10.77.2.1/24 dev pb
x pq-b ip addr add 10.77.2.2/24 dev b0
for n in pq-a pq-m pq-b; do x $n ip link set lo up; done
x pq-a ip link set a0 up; x pq-b ip link set b0 up
x pq-m ip link set pa up; x pq-m ip link set pb up
x pq-a ip route add default via 10.77.1.1
x pq-b ip route add default via 10.77.2.1
x pq-m sysctl -qw net.ipv4.ip_forward=1
echo "netns up: pq-a <-> pq-m <-> pq-b"
