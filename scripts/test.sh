#!/usr/bin/env bash
# Installs what the tests need (tshark, the oracle) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# The oracle (tshark, mergecap) and the real peers of the namespace tests.
need=()
for pair in tshark:tshark mergecap:wireshark-common sipp:sip-tester kamailio:kamailio \
    baresip:baresip nft:nftables tcpdump:tcpdump ip:iproute2 python3:python3 /usr/bin/time:time; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} (the tests compare against and call them)..."
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
mkdir -p target
# Every test binary runs even after one fails, and the closing line always prints.
status=0
cargo test --workspace --release --no-fail-fast 2>&1 | tee target/test.log || status=$?
# One closing line for the whole suite (cargo prints one per test binary).
awk '/^test result:/ {p += $4; f += $6} END {printf "%d passed, %d failed\n", p, f}' target/test.log
if [ "$status" != 0 ]; then
    echo "tests failed (see target/test.log)" >&2
    exit "$status"
fi
# Every fuzz target under libFuzzer for a bounded time (FUZZ_SECONDS each).
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
    fuzz/run.sh "${FUZZ_SECONDS:-30}"
fi
