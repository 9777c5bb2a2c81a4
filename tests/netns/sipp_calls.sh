# Sourced by the namespace rigs (topology.sh, relay_path.sh).
# sipp_calls CALLS LOG...: CALLS SIPp calls from the caller in A (UDP, to the
# proxy at 10.90.1.1) to the callee in B (TCP), both playing G.711, logs in
# $out; on failure prints SIPp's logs and the tails of LOG... and exits 1.
# Needs $here (the scenarios) and $out; UAC_XML, if set, is the caller's
# scenario instead of uac.xml (another file to play).
sipp_calls() {
    local calls=$1 uas
    shift
    ipa "$B" sipp -sf "$here/uas.xml" -t t1 -i 10.90.2.2 -p 5060 -mi 10.90.2.2 -mp 20000 \
        -m "$calls" -nostdin -trace_err -error_file "$out/uas-errors.log" >"$out/uas.log" 2>&1 &
    uas=$!
    pids+=($uas)
    sleep 0.5
    ipa "$A" sipp -sf "${UAC_XML:-$here/uac.xml}" -t u1 -i 10.90.1.2 -p 5060 -mi 10.90.1.2 -mp 30000 \
        -m "$calls" -l "$calls" -r 10 -nostdin -trace_err -error_file "$out/uac-errors.log" \
        10.90.1.1:5060 >"$out/uac.log" 2>&1 || {
        echo "caller SIPp failed:"
        tail -20 "$out/uac.log" "$out"/uac-errors.log "$@" 2>/dev/null
        exit 1
    }
    wait "$uas" || { echo "callee SIPp failed:"; tail -20 "$out/uas.log"; exit 1; }
}
