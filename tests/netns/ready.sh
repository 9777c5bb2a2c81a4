# Sourced by the namespace rigs (topology.sh, relay_path.sh).
# await_line FILE PATTERN WHAT [PID]: waits (up to 30 s) until FILE holds a
# line matching PATTERN, the sign that WHAT is ready; otherwise prints FILE
# and exits 1. With PID, a WHAT that exited fails at once (a crash at start
# need not wait out the 30 s). A fixed sleep is not enough: on a busy host rtpengine has taken
# 5 s to start (it makes a DTLS certificate first), and Kamailio, started
# before it answered, took it for down and relayed no media.
await_line() {
    local file=$1 pattern=$2 what=$3 pid=${4:-} i
    for i in $(seq 300); do
        grep -q -- "$pattern" "$file" 2>/dev/null && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "$what exited before it was ready (no \"$pattern\" in $file):"
            cat "$file" 2>/dev/null
            exit 1
        fi
        sleep 0.1
    done
    echo "$what did not become ready in 30 s (no \"$pattern\" in $file):"
    cat "$file" 2>/dev/null
    exit 1
}
