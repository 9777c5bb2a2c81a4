//! The KPI page and the lists over ClickHouse, as over SQLite
//! ([`crate::kpi_sums_between`], [`crate::load_between`],
//! [`crate::mos_bands`], [`crate::list_rows`]), across every probe's rows.
//! Sums read with `FINAL` (a row sent twice must count once); lists with
//! `LIMIT 1 BY record_id`.

use super::{decode, Params, Reader};
use crate::columns::Type;
use crate::kpi::{KpiSum, KpiWindow};
use crate::lists::{with_unit, List, ListQuery};
use crate::load::{LoadSum, MOS_BANDS};
use crate::readonly::Budget;
use crate::search::{MAX_ANSWER_BYTES, MAX_LIMIT, MAX_OFFSET};
use crate::StoreError;
use calliper_model::kpi::{KpiCounts, COUNTER_NAMES};
use serde_json::{Map, Value};

/// `start_ns` rounded down to a multiple of the interval (as SQLite's
/// `start_ns - (start_ns % i + i) % i`). The interval is a number written
/// here, as LIMIT's are: 18.16 cannot group by an expression holding
/// scalar subqueries over a Distributed table.
fn bucket(interval_ns: i64) -> String {
    let i = interval_ns.max(1);
    format!("start_ns - (start_ns % {i} + {i}) % {i}")
}

fn int(m: &Map<String, Value>, key: &str) -> i64 {
    m.get(key).and_then(Value::as_i64).unwrap_or(0)
}

impl Reader {
    /// KPI counters summed per interval and key of a dimension.
    pub fn kpi_sums_between(&self, w: &KpiWindow) -> Result<Vec<KpiSum>, StoreError> {
        let KpiWindow { dimension, interval_ns, from_ns, until_ns, max_rows } = *w;
        let mut p = Params::default();
        let b = bucket(interval_ns);
        let sums: Vec<String> =
            COUNTER_NAMES.iter().map(|c| format!("ifNull(toInt64(sum({c})), 0) AS {c}")).collect();
        let sql = format!(
            "SELECT {b} AS bucket, key, {} FROM {}.kpi FINAL PREWHERE dimension = {} \
             AND start_ns >= {} AND start_ns <= {} AND day BETWEEN {} AND {} \
             GROUP BY bucket, key ORDER BY bucket, key LIMIT {} FORMAT RowBinary",
            sums.join(", "),
            self.database,
            p.text(dimension),
            p.int(from_ns),
            p.int(until_ns),
            p.day(from_ns, 0),
            p.day(until_ns, 0),
            max_rows
        );
        let mut columns = vec![("bucket", Type::Integer, true), ("key", Type::Text, false)];
        columns.extend(COUNTER_NAMES.iter().map(|c| (*c, Type::Integer, true)));
        let answer = self.query(&sql, p.tables())?;
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (rows, _) = decode(&answer, &columns, max_rows, &mut budget)?;
        Ok(rows
            .iter()
            .map(|r| {
                let mut counts = KpiCounts::default();
                for (i, c) in COUNTER_NAMES.iter().enumerate() {
                    counts.0[i] = int(r, c).max(0) as u64;
                }
                KpiSum {
                    start_ns: int(r, "bucket"),
                    key: r.get("key").and_then(Value::as_str).unwrap_or("").into(),
                    counts,
                }
            })
            .collect())
    }

    /// The time series summed per interval: the most calls open, calls
    /// started and ended.
    pub fn load_between(
        &self,
        interval_ns: i64,
        from_ns: i64,
        until_ns: i64,
        max_rows: usize,
    ) -> Result<Vec<LoadSum>, StoreError> {
        let mut p = Params::default();
        let b = bucket(interval_ns);
        let sql = format!(
            "SELECT {b} AS bucket, ifNull(toInt64(max(calls_open)), 0), ifNull(toInt64(sum(calls_started)), 0), \
             ifNull(toInt64(sum(calls_ended)), 0) \
             FROM {}.traffic FINAL PREWHERE start_ns >= {} AND start_ns <= {} AND day BETWEEN {} AND {} \
             GROUP BY bucket ORDER BY bucket LIMIT {} FORMAT RowBinary",
            self.database,
            p.int(from_ns),
            p.int(until_ns),
            p.day(from_ns, 0),
            p.day(until_ns, 0),
            max_rows
        );
        let names = ["start_ns", "open", "started", "ended"];
        let columns: Vec<_> = names.iter().map(|n| (*n, Type::Integer, true)).collect();
        let answer = self.query(&sql, p.tables())?;
        let (rows, _) = decode(&answer, &columns, max_rows, &mut Budget::new(MAX_ANSWER_BYTES))?;
        Ok(rows
            .iter()
            .map(|r| LoadSum {
                start_ns: int(r, "start_ns"),
                max_calls_open: int(r, "open").max(0),
                calls_started: int(r, "started").max(0),
                calls_ended: int(r, "ended").max(0),
            })
            .collect())
    }

    /// Calls per band of worst stream MOS, and the answered ones without.
    pub fn mos_bands(
        &self,
        from_ns: i64,
        until_ns: i64,
    ) -> Result<([u64; MOS_BANDS.len()], u64), StoreError> {
        let mut p = Params::default();
        let last = MOS_BANDS.len() as i64 - 1;
        // SQLite's CAST truncates toward zero, as toInt64 does; the last
        // band is a number written here (a grouping key holding a scalar
        // subquery fails over a Distributed table in 18.16).
        let sql = format!(
            "SELECT least({last}, greatest(0, toInt64((assumeNotNull(worst_mos) - 1.0) * 2))) AS band, \
             toInt64(count()), toInt64(0) FROM {db}.calls FINAL \
             PREWHERE invite_ns >= {from} AND invite_ns <= {until} AND day BETWEEN {first} AND {last_day} \
             AND worst_mos IS NOT NULL GROUP BY band \
             UNION ALL SELECT toInt64(-1), toInt64(0), toInt64(count()) FROM {db}.calls FINAL \
             PREWHERE invite_ns >= {from} AND invite_ns <= {until} AND day BETWEEN {first} AND {last_day} \
             AND answer_ns IS NOT NULL AND worst_mos IS NULL \
             FORMAT RowBinary",
            db = self.database,
            from = p.int(from_ns),
            until = p.int(until_ns),
            first = p.day(from_ns, 0),
            last_day = p.day(until_ns, 0),
        );
        let names = ["band", "calls", "without"];
        let columns: Vec<_> = names.iter().map(|n| (*n, Type::Integer, true)).collect();
        let answer = self.query(&sql, p.tables())?;
        let most = MOS_BANDS.len() + 1;
        let (rows, _) = decode(&answer, &columns, most, &mut Budget::new(MAX_ANSWER_BYTES))?;
        let mut bands = [0u64; MOS_BANDS.len()];
        let mut without = 0;
        for r in &rows {
            match int(r, "band") {
                -1 => without += int(r, "without").max(0) as u64,
                b => bands[b.clamp(0, last) as usize] += int(r, "calls").max(0) as u64,
            }
        }
        Ok((bands, without))
    }

    /// The rows of `list` that `q` selects, newest first, and whether more
    /// follow; each with its `id` (its record id) and `probe`.
    pub fn list_rows(
        &self,
        list: List,
        q: &ListQuery,
    ) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let table = crate::clickhouse::Table::from_name(list.table())
            .ok_or_else(|| StoreError::Invalid(format!("no table {}", list.table())))?;
        let mut p = Params::default();
        let mut cond = Vec::new();
        if let Some(t) = q.from_ns {
            cond.push(format!("ts_ns >= {} AND day >= {}", p.int(t), p.day(t, 0)));
        }
        if let Some(t) = q.to_ns {
            cond.push(format!("ts_ns < {} AND day <= {}", p.int(t), p.day(t, 0)));
        }
        for (column, value) in &q.equals {
            let column = list.filters().iter().find(|c| *c == column).ok_or_else(|| {
                StoreError::Invalid(format!("{column}: not a filter of this list"))
            })?;
            cond.push(format!("{column} = {}", p.text(value)));
        }
        let mut columns = vec![("id", Type::Text, true), ("probe", Type::Text, true)];
        columns.extend(table.def().columns.iter().copied());
        let limit = q.limit.min(MAX_LIMIT);
        let sql = format!(
            "SELECT {} FROM {}.{} {} ORDER BY ts_ns DESC, record_id DESC LIMIT 1 BY record_id \
             LIMIT {}, {} FORMAT RowBinary",
            super::select_list(&columns),
            self.database,
            list.table(),
            match cond.is_empty() {
                true => String::new(),
                false => format!("PREWHERE {}", cond.join(" AND ")),
            },
            q.offset.min(MAX_OFFSET),
            limit + 1
        );
        let answer = self.query(&sql, p.tables())?;
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (mut rows, cut) = decode(&answer, &columns, limit as usize + 1, &mut budget)?;
        if cut {
            return Err(StoreError::Invalid(
                "the answer would be larger than the console sends at once: narrow the list".into(),
            ));
        }
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        if list == List::Alerts {
            rows.iter_mut().for_each(with_unit);
        }
        Ok((rows, more))
    }
}
