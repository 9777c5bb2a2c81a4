#!/usr/bin/env bash
# Call records per second into SQLite and into ClickHouse, in the same run
# (crates/cli/benches/sinks.rs: a real call's record with its streams,
# copied with a new Call-ID each; the sinks are measured, not the analysis).
# Starts two clickhouse-server shards on loopback ports in a temporary
# directory (a cluster named bench), measures one server alone and the
# cluster through both nodes, and stops them.
# usage: benches/clickhouse.sh [CALLS]
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-200000}
command -v clickhouse-server >/dev/null || { echo "clickhouse-server is needed (apt-get install clickhouse-server)" >&2; exit 1; }
cargo build --release -q --bench sinks -p calliper
bench=$(ls -t target/release/deps/sinks-* | grep -v '\.d$' | head -1)
dir=$(mktemp -d "${TMPDIR:-/tmp}/calliper-ch-bench.XXXXXX")
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
password=bench-password
http=($(port) $(port)); tcp=($(port) $(port))
shards=""
for i in 0 1; do
    shards+="<shard><replica><host>127.0.0.1</host><port>${tcp[$i]}</port><user>default</user><password>$password</password></replica></shard>"
done
for i in 0 1; do
    d=$dir/$i; mkdir -p "$d"
    cat >"$d/users.xml" <<XML
<?xml version="1.0"?>
<yandex><profiles><default></default></profiles>
<users><default><password>$password</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
<quotas><default></default></quotas></yandex>
XML
    cat >"$d/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$d/server.log</log><errorlog>$d/error.log</errorlog><console>0</console></logger>
    <listen_host>127.0.0.1</listen_host><http_port>${http[$i]}</http_port><tcp_port>${tcp[$i]}</tcp_port>
    <path>$d/data/</path><tmp_path>$d/tmp/</tmp_path><user_files_path>$d/uf/</user_files_path><format_schema_path>$d/fs/</format_schema_path>
    <users_config>$d/users.xml</users_config><default_profile>default</default_profile><default_database>default</default_database>
    <mark_cache_size>5368709120</mark_cache_size>
    <remote_servers><bench>$shards</bench></remote_servers>
</yandex>
XML
    clickhouse-server --config-file="$d/config.xml" >/dev/null 2>&1 &
    pids+=($!)
done
for i in 0 1; do
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:${http[$i]}/ping" >/dev/null && break
        sleep 0.2
    done
done
export CALLIPER_CLICKHOUSE_PASSWORD=$password
echo "== one server"
/usr/bin/time -f "   (whole process: %e s wall, %U s user, %S s sys)" "$bench" "$calls" "http://127.0.0.1:${http[0]}"
echo "== cluster of two shards, written through both nodes"
/usr/bin/time -f "   (whole process: %e s wall, %U s user, %S s sys)" "$bench" "$calls" "http://127.0.0.1:${http[1]},http://127.0.0.1:${http[0]}" bench
for i in 0 1; do
    curl -s --data-binary "SELECT database, table, sum(rows), sum(bytes_on_disk), round(sum(bytes_on_disk) / sum(rows)) FROM system.parts WHERE database LIKE 'calliper%' AND active GROUP BY database, table ORDER BY database, table FORMAT TSV" \
        -u "default:$password" "http://127.0.0.1:${http[$i]}/" | sed "s/^/   node $i: /"
done
