# Sourced by the namespace rigs (run.sh, media_relay.sh, edge_overlay.sh): with A, B and P
# naming three namespaces, builds
#
#   A 10.90.1.2 (a0) ── (pa) 10.90.1.1  P  10.90.2.1 (pb) ── (b0) 10.90.2.2 B
#
# with default routes through P, defines `ipa NS CMD...`, `link` and `pids` (namespaces.sh: killed,
# with what is left in the namespaces, when the script exits, before they go), `sipp_calls`
# (sipp_calls.sh) and `await_line` (ready.sh).
# Exits 77 (skip) when namespaces cannot be created.
. "$here/namespaces.sh"
namespaces "$A" "$B" "$P"
link "$A" a0 10.90.1.2/24 "$P" pa 10.90.1.1/24
link "$B" b0 10.90.2.2/24 "$P" pb 10.90.2.1/24
ipa "$A" ip route add default via 10.90.1.1
ipa "$B" ip route add default via 10.90.2.1

. "$here/sipp_calls.sh"
. "$here/ready.sh"
