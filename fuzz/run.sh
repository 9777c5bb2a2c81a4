#!/usr/bin/env bash
# Builds the fuzz targets and runs each for SECONDS (default 30), starting
# from the minimised corpus kept in fuzz/seeds-corpus/<target>/ plus seeds cut
# from the repo's captures and ../shared/pcaps when present, with the SIP/SDP
# dictionaries of fuzz/dict/. A crash fails the run and leaves its input
# under fuzz/artifacts/<target>/; so does an input that runs over 10 s (a hang).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-30}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
# Without AddressSanitizer: the targets are safe Rust, where it finds
# nothing, and it doubled the build; with overflow checks and debug
# assertions, which find arithmetic that input can push over.
flags=(-O -a -s none)
cargo +nightly fuzz build "${flags[@]}"
listed=$(cargo +nightly fuzz list)
mapfile -t known <<<"$listed"
[ -n "${known[0]}" ] || { echo "fuzz: cargo fuzz list named no target" >&2; exit 1; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${known[@]}")
for t in "${targets[@]}"; do
    printf '%s\n' "${known[@]}" | grep -qx "$t" || { echo "fuzz: no target named $t (there are: ${known[*]})" >&2; exit 2; }
done
seeds=$(mktemp -d)
logs=$(mktemp -d)
trap 'rm -rf "$seeds" "$logs"' EXIT
python3 seeds.py "$seeds" ../testdata/*.pcap $(ls ../../shared/pcaps/*/*.pcap 2>/dev/null || true)
# fuzz_one TARGET: runs one target, its report in logs/TARGET; fails on a
# crash, an out-of-memory or a hang.
fuzz_one() {
    local t=$1 dict=()
    mkdir -p "corpus/$t"
    [ -d "$seeds/$t" ] && cp -n "$seeds/$t"/* "corpus/$t/" 2>/dev/null || true
    [ -d "seeds-corpus/$t" ] && cp -n "seeds-corpus/$t"/* "corpus/$t/" 2>/dev/null || true
    case $t in
        sip) dict=(-dict=dict/sip.dict) ;;
        sdp | engine | whole_path | tcp) dict=(-dict=dict/sdp.dict) ;;
    esac
    local ran=0
    {
        echo "fuzz: $t for ${secs}s"
        cargo +nightly fuzz run "${flags[@]}" "$t" "corpus/$t" -- "${dict[@]}" \
            -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=70000 -print_final_stats=1 \
            >"$logs/$t.full" 2>&1 || ran=$?
        grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY)|panicked" "$logs/$t.full" || true
    } >"$logs/$t"
    # A fuzzer that did not run to its time (killed, failed to start) fails
    # too, even without an artifact.
    if [ "$ran" != 0 ]; then
        { echo "fuzz: $t exited with status $ran:"; tail -20 "$logs/$t.full"; } >>"$logs/$t"
        return 1
    fi
    # And a crash's input left from this or an earlier run fails it.
    if compgen -G "artifacts/$t/crash-*" >/dev/null || compgen -G "artifacts/$t/oom-*" >/dev/null ||
        compgen -G "artifacts/$t/timeout-*" >/dev/null; then
        echo "fuzz: $t found a crash:" >>"$logs/$t"
        ls "artifacts/$t" >>"$logs/$t"
        return 1
    fi
}
# One target per core at a time (libFuzzer runs one thread each); every
# target runs even after one crashed, and the first crash fails the run.
jobs=$(nproc 2>/dev/null || echo 1)
failed=0
running=()
for t in "${targets[@]}"; do
    fuzz_one "$t" &
    running+=("$!:$t")
    if [ ${#running[@]} -ge "$jobs" ]; then
        entry=${running[0]}
        running=("${running[@]:1}")
        wait "${entry%%:*}" || failed=1
        cat "$logs/${entry#*:}"
    fi
done
for entry in "${running[@]}"; do
    wait "${entry%%:*}" || failed=1
    cat "$logs/${entry#*:}"
done
[ "$failed" = 0 ] || { echo "fuzz: a target found a crash (its report above)"; exit 1; }
echo "fuzz: ${#targets[@]} targets ran ${secs}s each without a crash"
