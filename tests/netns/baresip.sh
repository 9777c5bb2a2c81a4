# Sourced by the namespace rigs (run.sh, hep_rtcp.sh): `baresip_setup OUT
# PORTS` writes a 20 s, 440 Hz WAV and two baresip configurations under OUT,
# alice (side a, 10.90.1.2, UDP) and bob (side b, 10.90.2.2, TCP, answering
# by itself), sending the WAV as PCMA with RTP on PORTS (`MIN-MAX`) and RTCP
# on its own port. `baresip_call OUT SECONDS` then starts bob, and a second
# later alice dialling bob and hanging up after SECONDS; it sets `caller` and
# `callee` to their pids and adds both to `pids`.
baresip_setup() {
    local out=$1 ports=$2 side ip user
    python3 - "$out/tone.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb")
w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000)
w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / 8000))) for i in range(8000 * 20)))
PY
    for side in a b; do
        ip=10.90.1.2 user=alice
        [ $side = b ] && ip=10.90.2.2 user=bob
        mkdir -p "$out/baresip-$side"
        cat >"$out/baresip-$side/config" <<CFG
poll_method epoll
sip_listen $ip:5060
module_path /usr/lib/baresip/modules
module g711.so
module aufile.so
module aubridge.so
module menu.so
module account.so
audio_source aufile,$out/tone.wav
audio_player aubridge,$side
audio_alert aubridge,$side
rtp_ports $ports
rtcp_mux no
CFG
        echo "<sip:$user@$ip;transport=$([ $side = b ] && echo tcp || echo udp)>;regint=0;answermode=auto;audio_codecs=PCMA" \
            >"$out/baresip-$side/accounts"
    done
}

baresip_call() {
    local out=$1 seconds=$2
    ipa "$B" baresip -f "$out/baresip-b" -t 16 >"$out/baresip-b.log" 2>&1 &
    callee=$!
    pids+=("$callee")
    sleep 1
    ipa "$A" baresip -f "$out/baresip-a" -e "/dial sip:bob@10.90.1.1" -t "$seconds" >"$out/baresip-a.log" 2>&1 &
    caller=$!
    pids+=("$caller")
}
