#!/usr/bin/env bash
# Installs what the tests need (tshark, the oracle) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says how long it took, so a slow CI run shows where its time went.
step_start=$SECONDS
took() {
    echo "test.sh: $1 took $((SECONDS - step_start)) s (the whole run so far: $SECONDS s)"
    step_start=$SECONDS
}
# The oracle (tshark, mergecap), the real peers of the namespace tests, and
# the browser (Chromium and its WebDriver) of the console test, and valgrind
# (callgrind counts the packet path's instructions: benches/budget.sh), and
# ClickHouse's server (the tests start their own, on loopback ports).
# What a group named in CALLIPER_SKIP (README) alone needs is not installed.
skipped() {
    local skip=${CALLIPER_SKIP:-}
    skip=$(printf '%s' "$skip" | tr -d '[:space:]')
    case ",$skip," in *",$1,"*) return 0 ;; esac
    return 1
}
need=()
# command:package, or command:package:group for what only that group's tests use.
for entry in tshark:tshark mergecap:wireshark-common sipp:sip-tester kamailio:kamailio \
    baresip:baresip rtpengine:rtpengine-daemon nft:nftables tcpdump:tcpdump ip:iproute2 python3:python3 /usr/bin/time:time \
    linphonec:linphone-cli:pesq espeak-ng:espeak-ng sox:sox iptables:iptables sngrep:sngrep \
    chromium:chromium:browser /usr/bin/chromedriver:chromium-driver:browser valgrind:valgrind:budget \
    /usr/sbin/clickhouse-server:clickhouse-server:clickhouse; do
    IFS=: read -r command package group <<<"$entry"
    if [ -n "$group" ] && skipped "$group"; then continue; fi
    command -v "$command" >/dev/null 2>&1 || need+=("$package")
done
# spandsp (the PESQ rig's PLC, and the audio decoders' oracle), what
# netfilterqueue builds on, a font for the browser's screenshots, bcg729
# (the G.729 feature) and cmake (which builds libopus).
packages=(libnetfilter-queue-dev libbcg729-dev cmake)
skipped browser || packages+=(fonts-dejavu-core)
{ skipped spandsp && skipped pesq; } || packages+=(libspandsp2)
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || need+=("$package")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} (the tests compare against and call them)..."
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p target
# The PESQ scorer, the loss injector and chdb (a current ClickHouse, embedded)
# are Python packages: used where they are installed, else installed into a
# virtual environment under target/.
# (netfilterqueue also drops packets in the relay's namespace test.)
modules="netfilterqueue"
skipped pesq || modules+=" pesq numpy scipy soundfile"
skipped chdb || modules+=" chdb"
if ! python3 -c "import ${modules// /, }" 2>/dev/null; then
    venv=$PWD/target/pesq-python
    if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -c "import ${modules// /, }" 2>/dev/null; then
        echo "installing $modules into $venv (the PESQ comparison and the ClickHouse check need them)..."
        # pesq and netfilterqueue build C extensions: a compiler and Python's headers.
        for package in python3-venv python3-dev gcc; do
            dpkg -s "$package" >/dev/null 2>&1 || {
                apt-get update -qq
                apt-get install -y -qq --no-install-recommends python3-venv python3-dev gcc >/dev/null
                break
            }
        done
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q numpy cython
        "$venv/bin/pip" install -q $modules
    fi
    export PATH=$venv/bin:$PATH
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
took "installing what the tests need"
# Every test binary runs even after one fails, and the closing line always prints.
status=0
# G.729 (libbcg729, GPL) is a cargo feature of the command: the tests build
# with it, so its decoder and its PESQ call run with the rest. A second
# build for them alone took about a minute of each run.
all=(--workspace --release --features calliper/g729)
cargo test "${all[@]}" --no-run 2>&1 | tee target/test.log || status=$?
took "building the tests"
# The test binaries run one after another. The tests against real peers in
# real time (namespaces, Kamailio, rtpengine, linphone and PESQ) are not run
# beside others: on a clean checkout, overlapping them with the capture tests
# made Kamailio's HEP arrive after the collector's 100 ms reorder window, and
# overlapping PESQ with the namespace tests spoiled its loss-free anchor call.
# The command's offline tests run four at a time: a few of them wait in real
# time (a 20 s paced replay, the console's 10 s header timeout), and with two
# the CPU sat idle behind them (111 s against 76 s on this machine's 2
# cores). Every other binary keeps libtest's default. All three runs select
# the whole workspace and its features, so cargo resolves features as the
# build above did and rebuilds nothing (selecting packages instead rebuilt
# half the tree).
if [ "$status" = 0 ]; then
    others=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"] and t["name"] != "offline":
            print("--test", t["name"])')
    [ -n "$others" ] || { echo "cargo metadata named no test target" >&2; exit 1; }
    # shellcheck disable=SC2086 # one word per option and target name
    cargo test "${all[@]}" --no-fail-fast --lib --bins $others 2>&1 | tee -a target/test.log || status=$?
    cargo test "${all[@]}" --no-fail-fast --test offline -- --test-threads 4 2>&1 | tee -a target/test.log || status=$?
    cargo test "${all[@]}" --no-fail-fast --doc 2>&1 | tee -a target/test.log || status=$?
    took "running the tests"
fi
# One closing line for the whole suite (cargo prints one per test binary).
awk '/^test result:/ {p += $4; f += $6} END {printf "%d passed, %d failed\n", p, f}' target/test.log
if [ "$status" != 0 ]; then
    echo "tests failed (see target/test.log)" >&2
    exit "$status"
fi
# The packet path's instruction budget (callgrind; CALLIPER_SKIP=budget
# skips it), on the command the tests built: building it alone (`-p
# calliper`) would compile it once more.
if ! CALLIPER=target/release/calliper benches/budget.sh; then
    echo "the instruction budget check failed (benches/budget.sh; its output above says why)" >&2
    exit 1
fi
took "the instruction budget"
# Every fuzz target under libFuzzer for a bounded time (FUZZ_SECONDS each).
if [ "${FUZZ_SECONDS:-15}" != 0 ]; then
    fuzz/run.sh "${FUZZ_SECONDS:-15}"
    took "building and running the fuzz targets"
fi
