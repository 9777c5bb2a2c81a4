#!/usr/bin/env python3
"""Checks what Calliper's ClickHouse sink sends against a current ClickHouse
(chdb: the engine embedded, 25/26): every statement of `calliper
clickhouse-schema`, then every spooled batch (the insert statement the sink
sends, and its RowBinary rows) inserted as the sink would, then the rows
read back with FINAL and compared with the same run's SQLite database,
field by field, in both directions. Also runs the sink's own checks of the
tables (system.tables, system.columns) and asserts what it relies on.

Then runs the console's searches (QUERIES_DIR: N.sql, its external table
as N.bin and N.structure, and N.expected, the calls SQLite finds) and
compares the number of calls each finds.

usage: chdb_check.py SCHEMA.sql SPOOL_DIR CALLS.db QUERIES_DIR
Prints the engine's version and the rows compared; exits 1 on a difference.
"""
import json
import os
import sqlite3
import sys
import tempfile

import chdb
from chdb import session

schema_file, spool_dir, db_file, queries_dir = sys.argv[1:5]
work = tempfile.mkdtemp(prefix="calliper-chdb-")
s = session.Session(os.path.join(work, "db"))
version = s.query("SELECT version()", "CSV").data().strip().strip('"')
print(f"chdb {chdb.__version__}, ClickHouse {version}")

for statement in open(schema_file).read().split(";\n"):
    if statement.strip():
        s.query(statement)

# The sink's checks: the engines and columns it reads back.
tables = dict(
    line.split("\t")
    for line in s.query("SELECT name, engine FROM system.tables WHERE database = 'calliper' FORMAT TSV", "TSV").data().splitlines()
)
assert tables.get("calls") == "ReplacingMergeTree" and tables.get("streams") == "ReplacingMergeTree", tables
columns = s.query("SELECT table, name FROM system.columns WHERE database = 'calliper' FORMAT TSV", "TSV").data()
assert "calls\tcall_id" in columns.splitlines(), "system.columns lacks calls.call_id"

batches = 0
for name in sorted(os.listdir(spool_dir)):
    if not name.endswith(".rows"):
        continue
    body = open(os.path.join(spool_dir, name), "rb").read()
    insert, rows = body.split(b"\n", 1)
    insert = insert.decode()
    assert insert.startswith("INSERT INTO calliper.") and insert.endswith(" FORMAT RowBinary"), insert
    table = insert.split()[2]
    listed = insert[insert.index("(") + 1 : insert.index(")")].split(", ")
    types = dict(
        line.split("\t")[:2]
        for line in s.query(f"DESCRIBE TABLE {table} FORMAT TSV", "TSV").data().splitlines()
    )
    structure = ", ".join(f"{c} {types[c]}" for c in listed)
    path = os.path.join(work, f"{name}.bin")
    open(path, "wb").write(rows)
    s.query(f"INSERT INTO {table} ({', '.join(listed)}) SELECT * FROM file('{path}', 'RowBinary', '{structure}')")
    batches += 1
assert batches > 0, f"no spooled batches in {spool_dir}"

# The call index, filled by its materialised view: a Call-ID row per call.
def distinct_ids(table, where="1"):
    return int(s.query(f"SELECT count(DISTINCT record_id) FROM calliper.{table} WHERE {where}", "CSV").data().strip())


indexed, calls = distinct_ids("call_index", "kind = 0"), distinct_ids("calls")
assert indexed == calls > 0, (indexed, calls)


def canon(v):
    """A value as both databases' forms reduce to it."""
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v)
    return v


def sqlite_rows(sql, skip):
    c = sqlite3.connect(db_file)
    c.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    cur = c.execute(sql)
    names = [d[0] for d in cur.description]
    return sorted(
        json.dumps({n: canon(v) for n, v in zip(names, r) if n not in skip}, sort_keys=True)
        for r in cur
    )


def clickhouse_rows(table):
    types = dict(
        line.split("\t")[:2]
        for line in s.query(f"DESCRIBE TABLE calliper.{table} FORMAT TSV", "TSV").data().splitlines()
    )
    calls = {
        r["id"]: r["call_id"]
        for r in map(json.loads, s.query("SELECT toString(record_id) AS id, call_id FROM calliper.calls FINAL", "JSONEachRow").data().splitlines())
    }
    out = []
    for r in map(json.loads, s.query(f"SELECT * FROM calliper.{table} FINAL", "JSONEachRow").data().splitlines()):
        row = {}
        for k, v in r.items():
            if k in ("probe", "record_id", "day"):
                continue
            if k == "call_record_id":
                row["parent_call_id"] = None if v is None else calls.get(str(v))
                continue
            if v is not None and "Int" in types[k]:
                v = int(v)
            elif v is not None and "Float" in types[k]:
                v = float(v)  # JSON writes 1.0 as 1
            row[k] = canon(v)
        out.append(json.dumps(row, sort_keys=True))
    return sorted(out)


compared = 0
for table, sql, skip in [
    ("calls", "SELECT * FROM calls", {"id"}),
    ("streams", "SELECT s.*, c.call_id AS parent_call_id FROM streams s LEFT JOIN calls c ON s.call = c.id", {"id", "call"}),
]:
    a, b = sqlite_rows(sql, skip), clickhouse_rows(table)
    only_sqlite = [r for r in a if r not in b]
    only_clickhouse = [r for r in b if r not in a]
    if only_sqlite or only_clickhouse or len(a) != len(b):
        print(f"{table}: {len(a)} rows in SQLite, {len(b)} in ClickHouse {version}")
        for r in only_sqlite[:3]:
            print("only in SQLite:", r)
        for r in only_clickhouse[:3]:
            print("only in ClickHouse:", r)
        sys.exit(1)
    compared += len(a)
print(f"{batches} batches, {compared} rows equal in both directions")

# The console's searches: the external table `_p` read from its file.
searched = 0
for name in sorted(os.listdir(queries_dir)):
    if not name.endswith(".sql"):
        continue
    stem = os.path.join(queries_dir, name[: -len(".sql")])
    sql = open(stem + ".sql").read()
    assert sql.endswith(" FORMAT RowBinary"), sql
    sql = sql[: -len(" FORMAT RowBinary")]
    if os.path.exists(stem + ".bin"):
        structure = open(stem + ".structure").read()
        sql = sql.replace(" FROM _p)", f" FROM file('{stem}.bin', 'RowBinary', '{structure}'))")
    assert "_p)" not in sql, sql
    got = int(s.query(f"SELECT count() FROM ({sql})", "CSV").data().strip())
    want = int(open(stem + ".expected").read())
    if got != want:
        print(f"{name}: {got} calls in ClickHouse {version}, {want} in SQLite: {sql}")
        sys.exit(1)
    searched += 1
assert searched > 0, f"no queries in {queries_dir}"
print(f"{searched} console searches equal SQLite's")
