//! The tables: what [`schema`] makes on each server (from
//! [`crate::columns`], as SQLite's are), how [`Schema`] checks and brings
//! up to date what a server already has, and the insert each batch starts
//! with.

use super::http::Endpoint;
use super::HttpError;
use super::Table;
use crate::StoreError;
use std::collections::HashSet;

/// The statements that make the database and its tables on one server
/// (none drops or changes anything that exists). With a `cluster` (one
/// named in the servers' `remote_servers`), the rows are kept in
/// `calls_local` and `streams_local` on each shard, and `calls` and
/// `streams` are `Distributed` tables over them, sharded by `record_id` so
/// that a row sent twice meets itself on one shard (where `FINAL` makes it
/// one); each server a probe or the console talks to needs these.
pub fn schema(database: &str, cluster: Option<&str>) -> Vec<String> {
    let mut statements = table_statements(database, cluster);
    statements.extend(call_index(database, cluster));
    statements
}

/// Where a table's rows are kept on each server: `NAME_local` behind a
/// `Distributed` table of its own name with a cluster, the table itself
/// without.
fn stored(name: &str, cluster: Option<&str>) -> String {
    match cluster {
        Some(_) => format!("{name}_local"),
        None => name.to_string(),
    }
}

/// The (table, engine) pairs a server must have for `name`.
fn engines_of(name: &str, cluster: Option<&str>) -> Vec<(String, &'static str)> {
    let mut engines = vec![(stored(name, cluster), "ReplacingMergeTree")];
    if cluster.is_some() {
        engines.push((name.to_string(), "Distributed"));
    }
    engines
}

/// The database and the tables of [`Table::all`].
fn table_statements(database: &str, cluster: Option<&str>) -> Vec<String> {
    let mut statements = vec![format!("CREATE DATABASE IF NOT EXISTS {database}")];
    for table in Table::all() {
        let name = table.name();
        let stored = stored(name, cluster);
        let defs: Vec<String> =
            table.clickhouse_columns().iter().map(|(n, t)| format!("{n} {t}")).collect();
        let order = table.order_by();
        statements.push(format!(
            "CREATE TABLE IF NOT EXISTS {database}.{stored} (\n    {}\n) ENGINE = ReplacingMergeTree() PARTITION BY day ORDER BY ({order})",
            defs.join(",\n    ")
        ));
        if let Some(cluster) = cluster {
            statements.push(format!(
                "CREATE TABLE IF NOT EXISTS {database}.{name} AS {database}.{stored} ENGINE = Distributed({cluster}, {database}, {stored}, record_id)"
            ));
        }
    }
    statements
}

/// The call index: for each call, a row per value a search names exactly
/// (its Call-ID, its caller's and its callee's user part: [`IndexKey`]),
/// with the call's day, INVITE time and id, sorted by kind, value and time.
/// A search for one of them reads there the INVITE times it wants, then
/// only those granules of the calls (sorted by time): without it, a
/// search for a Call-ID read every Call-ID of every day, and one for a
/// caller every caller of its days. The server fills it itself: a
/// materialised view copies each block inserted into the calls table.
/// Kept by day, like the calls, and dropped with them.
pub(crate) const INDEX: &str = "call_index";
/// The materialised view that feeds [`INDEX`].
const FEED: &str = "call_index_feed";
/// A table whose presence says the calls written before the index existed
/// have been copied into it (on this server): the console uses the index
/// only where every node it lists has it.
pub(crate) const FILLED: &str = "call_index_filled";

/// What a row of the call index is for (its `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum IndexKey {
    /// The Call-ID.
    CallId = 0,
    /// The From user (the `caller` filter).
    Caller = 1,
    /// The To user (the `callee` filter).
    Callee = 2,
}

/// The call index's rows of the calls in `database`.`calls`: the view's
/// query, and the copy of calls an older version wrote.
fn index_rows(database: &str, calls: &str) -> String {
    format!(
        "SELECT k.1 AS kind, k.2 AS key, day, invite_ns, record_id FROM {database}.{calls} \
         ARRAY JOIN arrayFilter(x -> x.2 != '', [({}, call_id), ({}, ifNull(from_user, '')), ({}, ifNull(to_user, ''))]) AS k",
        key_literal(IndexKey::CallId),
        key_literal(IndexKey::Caller),
        key_literal(IndexKey::Callee)
    )
}

fn key_literal(k: IndexKey) -> String {
    format!("toUInt8({})", k as u8)
}

/// The index's statements: the table (with a cluster, `_local` on each
/// shard behind a `Distributed` one, sharded as the calls are), then the
/// view that fills it from the calls kept on the same server.
fn call_index(database: &str, cluster: Option<&str>) -> Vec<String> {
    let (stored, calls) = (stored(INDEX, cluster), stored(Table::CALLS.name(), cluster));
    let mut statements = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {database}.{stored} (kind UInt8, key String, day Date, invite_ns Int64, record_id UInt64) \
             ENGINE = ReplacingMergeTree() PARTITION BY day ORDER BY (kind, key, invite_ns, record_id)"
        ),
        format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {database}.{FEED} TO {database}.{stored} AS {}",
            index_rows(database, &calls)
        ),
    ];
    if let Some(cluster) = cluster {
        statements.push(format!(
            "CREATE TABLE IF NOT EXISTS {database}.{INDEX} AS {database}.{stored} ENGINE = Distributed({cluster}, {database}, {stored}, record_id)"
        ));
    }
    statements
}

/// The tables a server must have, made if missing and then checked: a
/// table of the same name made otherwise (a database first written without
/// a cluster, then with one) is refused by name rather than written wrongly.
pub(crate) struct Schema {
    /// The database and the tables of [`Table::all`].
    statements: Vec<String>,
    /// The call index, made once the calls table has its columns.
    index_statements: Vec<String>,
    database: String,
    /// (table, engine) as `schema` makes them, the tables'.
    engines: Vec<(String, &'static str)>,
    /// The same for the call index.
    index_engines: Vec<(String, &'static str)>,
    /// The index's stored table and the calls table it is filled from, on
    /// each server.
    index_names: (String, String),
}

/// The columns of each table name the schema makes (stored and `Distributed`).
fn named_columns(engines: &[(String, &'static str)]) -> Vec<(String, Vec<(String, String)>)> {
    engines
        .iter()
        .filter_map(|(name, _)| {
            let table = Table::from_name(name.strip_suffix("_local").unwrap_or(name))?;
            Some((name.clone(), table.clickhouse_columns()))
        })
        .collect()
}

impl Schema {
    pub(super) fn new(database: &str, cluster: Option<&str>) -> Schema {
        let engines = Table::all().flat_map(|t| engines_of(t.name(), cluster)).collect();
        let mut index_engines = engines_of(INDEX, cluster);
        index_engines.push((FEED.to_string(), "MaterializedView"));
        Schema {
            statements: table_statements(database, cluster),
            index_statements: call_index(database, cluster),
            database: database.to_string(),
            engines,
            index_engines,
            index_names: (stored(INDEX, cluster), stored(Table::CALLS.name(), cluster)),
        }
    }

    /// The tables that hold rows (not the `Distributed` ones).
    pub(crate) fn stored_tables(&self) -> Vec<&str> {
        self.engines
            .iter()
            .chain(&self.index_engines)
            .filter(|(_, e)| *e == "ReplacingMergeTree")
            .map(|(t, _)| t.as_str())
            .collect()
    }

    /// The database the tables are in.
    pub(crate) fn database(&self) -> &str {
        &self.database
    }

    /// Makes the tables on the server `e` speaks to, checks their engines,
    /// and adds the columns a table made by an earlier version lacks. A
    /// refused `CREATE` (a user allowed to insert, not to create) is not an
    /// error when the tables are there.
    pub(crate) fn make(&self, e: &Endpoint) -> Result<(), HttpError> {
        run(e, &self.statements)?;
        self.check_engines(e, &self.engines)?;
        self.add_columns(e)?;
        // After the columns: the index's view reads the calls' users.
        run(e, &self.index_statements)?;
        self.check_engines(e, &self.index_engines)?;
        // Not fatal: until the copy is done (or where this user may not
        // make its marker) the console searches without the index.
        if !self.index_filled(e)? {
            let _ = self.fill_index(e);
        }
        Ok(())
    }

    /// Copies into the call index the calls written before it existed (by
    /// an older version; its view sees only inserts from then on), a day
    /// at a time so that each request ends within its deadline, then
    /// marks it filled. Cut short, it is done again the next time: a call
    /// copied twice, or both copied and inserted meanwhile, is one row once
    /// merged, and the search reads distinct times.
    fn fill_index(&self, e: &Endpoint) -> Result<(), HttpError> {
        let (stored, calls) = &self.index_names;
        let db = &self.database;
        let listed = e.tsv(&format!(
            "SELECT DISTINCT toUInt16(min_date) FROM system.parts WHERE database = '{db}' AND table = '{calls}' AND active FORMAT TSV"
        ))?;
        // Days as numbers (a partition of day 0 is named 0000-00-00).
        for day in listed.lines() {
            let Ok(day) = day.parse::<u16>() else {
                continue;
            };
            let fill = format!(
                "INSERT INTO {db}.{stored} {} WHERE day = toDate({day})",
                index_rows(db, calls)
            );
            e.post(fill.as_bytes())?;
        }
        let mark =
            format!("CREATE TABLE IF NOT EXISTS {db}.{FILLED} (filled UInt8) ENGINE = TinyLog");
        e.post(mark.as_bytes())?;
        Ok(())
    }

    /// Refuses tables of another engine (or missing) by name.
    fn check_engines(&self, e: &Endpoint, engines: &[(String, &str)]) -> Result<(), HttpError> {
        let answer = e.tsv(&format!(
            "SELECT name, engine FROM system.tables WHERE database = '{}' FORMAT TSV",
            self.database
        ))?;
        // Each table looked for in the answer's rows, nothing collected: the
        // answer is the server's, up to `MAX_RESPONSE`, and a row is a few bytes.
        let rows = || answer.lines().filter_map(|l| l.split_once('\t'));
        for (table, engine) in engines {
            let have = rows().find(|(n, _)| n == table).map(|(_, e)| e);
            if have != Some(*engine) {
                return Err(HttpError::Server {
                    status: 0,
                    message: format!(
                        "{}.{table} is {} on {}, where {engine} is wanted (a database made with{} --clickhouse-cluster, or none made: can this user create tables?): use another --clickhouse-database",
                        self.database,
                        have.unwrap_or("missing"),
                        e.host(),
                        if *engine == "Distributed" || table.ends_with("_local") { "out" } else { "" },
                    ),
                });
            }
        }
        Ok(())
    }

    /// Adds the columns a table made by an earlier version lacks.
    fn add_columns(&self, e: &Endpoint) -> Result<(), HttpError> {
        let answer = e.tsv(&format!(
            "SELECT table, name FROM system.columns WHERE database = '{}' FORMAT TSV",
            self.database
        ))?;
        let wanted = named_columns(&self.engines);
        let mut missing: HashSet<(&str, &str)> = wanted
            .iter()
            .flat_map(|(table, columns)| {
                columns.iter().map(move |(n, _)| (table.as_str(), n.as_str()))
            })
            .collect();
        // One pass over the server's rows, keeping only what was wanted.
        for row in answer.lines().filter_map(|l| l.split_once('\t')) {
            missing.remove(&row);
        }
        for (table, columns) in &wanted {
            for (name, ty) in columns {
                if missing.contains(&(table.as_str(), name.as_str())) {
                    let add =
                        format!("ALTER TABLE {}.{table} ADD COLUMN {name} {ty}", self.database);
                    e.post(add.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Whether the call index holds the calls written before it was made.
    fn index_filled(&self, e: &Endpoint) -> Result<bool, HttpError> {
        let count = e.tsv(&format!(
            "SELECT count() FROM system.tables WHERE database = '{}' AND name = '{FILLED}' FORMAT TSV",
            self.database
        ))?;
        Ok(count.trim() != "0")
    }
}

/// Runs `statements`; a refused one (a user allowed to insert, not to
/// create) is not an error when what it makes is there, as checked next.
fn run(e: &Endpoint, statements: &[String]) -> Result<(), HttpError> {
    for statement in statements {
        if let Err(n @ HttpError::Network(_)) = e.post(statement.as_bytes()) {
            return Err(n);
        }
    }
    Ok(())
}

/// [`schema`] for names given by a user: refused unless plain identifiers.
pub fn checked_schema(database: &str, cluster: Option<&str>) -> Result<Vec<String>, StoreError> {
    check_names(database, cluster)?;
    Ok(schema(database, cluster))
}

pub(super) fn check_names(database: &str, cluster: Option<&str>) -> Result<(), StoreError> {
    for (what, name) in [("database", Some(database)), ("cluster", cluster)] {
        if let Some(name) = name.filter(|n| !plain_name(n)) {
            return Err(StoreError::Invalid(format!(
                "{name:?}: a ClickHouse {what} name here is letters, digits and _, not starting with a digit"
            )));
        }
    }
    Ok(())
}

/// True for a name ClickHouse takes without quoting (a database, a cluster).
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// The insert of `table`'s rows ([`row_binary`]: each value in its
/// binary form, exact for every float and every byte of text).
pub(super) fn insert(database: &str, table: Table) -> String {
    let names: Vec<String> = table.clickhouse_columns().into_iter().map(|(n, _)| n).collect();
    format!("INSERT INTO {database}.{} ({}) FORMAT RowBinary\n", table.name(), names.join(", "))
}
