# Sourced by the rigs that run Calliper edge nodes (edge_overlay.sh,
# relay_path.sh). `edge_table CONTROL ADDRESS PORTS PEER-NODE PEER-ADDRESS`
# prints a node's [edge] table (`relay run`'s configuration): the ng
# control socket (udp:CONTROL), the address and port range it relays media
# on, and its peer edge's node id and address.
edge_table() {
    cat <<TOML
[edge]
control = "udp:$1"
address = "$2"
ports = "$3"
peers = [{ node = $4, address = "$5" }]
TOML
}
