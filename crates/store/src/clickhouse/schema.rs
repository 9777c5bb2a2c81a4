//! The tables: what [`schema`] makes on each server (from
//! [`crate::columns`], as SQLite's are), how [`Schema`] checks and brings
//! up to date what a server already has, and the insert each batch starts
//! with.

use super::http::Endpoint;
use super::HttpError;
use super::Table;
use crate::StoreError;

/// The statements that make the database and its tables on one server
/// (none drops or changes anything that exists). With a `cluster` (one
/// named in the servers' `remote_servers`), the rows are kept in
/// `calls_local` and `streams_local` on each shard, and `calls` and
/// `streams` are `Distributed` tables over them, sharded by `record_id` so
/// that a row sent twice meets itself on one shard (where `FINAL` makes it
/// one); each server a probe or the console talks to needs these.
pub fn schema(database: &str, cluster: Option<&str>) -> Vec<String> {
    let mut statements = vec![format!("CREATE DATABASE IF NOT EXISTS {database}")];
    for table in Table::all() {
        let name = table.name();
        let stored = match cluster {
            Some(_) => format!("{name}_local"),
            None => name.to_string(),
        };
        let defs: Vec<String> = table
            .clickhouse_columns()
            .iter()
            .map(|(n, t)| format!("{n} {t}"))
            .collect();
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

/// The tables a server must have, made if missing and then checked: a
/// table of the same name made otherwise (a database first written without
/// a cluster, then with one) is refused by name rather than written wrongly.
pub(crate) struct Schema {
    statements: Vec<String>,
    database: String,
    /// (table, engine) as `schema` makes them.
    engines: Vec<(String, &'static str)>,
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
        let mut engines = Vec::new();
        for t in Table::all() {
            match cluster {
                Some(_) => {
                    engines.push((format!("{}_local", t.name()), "ReplacingMergeTree"));
                    engines.push((t.name().to_string(), "Distributed"));
                }
                None => engines.push((t.name().to_string(), "ReplacingMergeTree")),
            }
        }
        Schema {
            statements: schema(database, cluster),
            database: database.to_string(),
            engines,
        }
    }

    /// The tables that hold rows (not the `Distributed` ones).
    pub(crate) fn stored_tables(&self) -> Vec<&str> {
        self.engines
            .iter()
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
        for statement in &self.statements {
            if let Err(n @ HttpError::Network(_)) = e.post(statement.as_bytes()) {
                return Err(n);
            }
        }
        let answer = e.post(
            format!(
                "SELECT name, engine FROM system.tables WHERE database = '{}' FORMAT TSV",
                self.database
            )
            .as_bytes(),
        )?;
        let answer = String::from_utf8_lossy(&answer);
        let found: Vec<(&str, &str)> = answer.lines().filter_map(|l| l.split_once('\t')).collect();
        for (table, engine) in &self.engines {
            let have = found.iter().find(|(n, _)| n == table).map(|(_, e)| *e);
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
        let answer = e.post(
            format!(
                "SELECT table, name FROM system.columns WHERE database = '{}' FORMAT TSV",
                self.database
            )
            .as_bytes(),
        )?;
        let answer = String::from_utf8_lossy(&answer);
        let have: Vec<(&str, &str)> = answer.lines().filter_map(|l| l.split_once('\t')).collect();
        for (table, columns) in named_columns(&self.engines) {
            for (name, ty) in columns {
                if !have.contains(&(table.as_str(), name.as_str())) {
                    let add = format!(
                        "ALTER TABLE {}.{table} ADD COLUMN {name} {ty}",
                        self.database
                    );
                    e.post(add.as_bytes())?;
                }
            }
        }
        Ok(())
    }
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
    let names: Vec<String> = table
        .clickhouse_columns()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    format!(
        "INSERT INTO {database}.{} ({}) FORMAT RowBinary\n",
        table.name(),
        names.join(", ")
    )
}
