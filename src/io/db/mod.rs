//! Keyed sinks into a real database, exactly once: each epoch's rows and the
//! epoch number are written in one transaction together with a sink-state
//! row, so a replay after a crash skips the epochs already applied.
//!
//! The rows are applied as the view's table holds them ([`crate::Tables`]):
//!
//! * **Append**: inserted.
//! * **Update**: upserted on `(window_start, window_end, key columns)` when
//!   the view has a key (its `GROUP BY` columns); a window's final rows
//!   (`final = true`) first delete the window's rows, so what an open window
//!   no longer holds goes; a view without a key inserts its provisional rows.
//! * **Complete**: the table's rows are replaced by the epoch's.
//!
//! The sink creates its table from the view's output schema, or checks an
//! existing one and refuses a mismatch naming the columns. Column types:
//! integers and booleans `INTEGER`, floats `REAL`, timestamps `INTEGER`
//! milliseconds since the Unix epoch, dates, decimals and strings `TEXT`
//! (decimals exactly as written), binary `BLOB`.
//!
//! The sink-state table `_thund_sink` holds, per sink table, the last epoch
//! applied and the run it belongs to (a caller-chosen identity, such as the
//! state root and the view's fingerprint): a table written by another run is
//! refused, never silently skipped into.

use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use rusqlite::types::Value;

use crate::error::{Error, Result};
use crate::spec::OutputMode;
use crate::time::to_millis;

/// Where a database sink writes: `sqlite:///abs/path.db?table=name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkUrl {
    /// The database file.
    pub path: PathBuf,
    /// The table; `None`: the view's name.
    pub table: Option<String>,
}

impl SinkUrl {
    /// Parse `sqlite:///abs/path.db[?table=name]`.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |m: &str| Error::Output {
            path: PathBuf::from(url),
            message: format!("{m}: a database sink is `sqlite:///absolute/path.db?table=name`"),
        };
        let rest = url
            .strip_prefix("sqlite://")
            .ok_or_else(|| bad("not a sqlite:// URL"))?;
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        if !path.starts_with('/') {
            return Err(bad("the path must be absolute"));
        }
        let mut table = None;
        for kv in query.into_iter().flat_map(|q| q.split('&')) {
            match kv.split_once('=') {
                Some(("table", t)) if valid_name(t) => table = Some(t.to_string()),
                Some(("table", t)) => {
                    return Err(bad(&format!(
                        "table `{t}` is not a name (letters, digits and _, not first a digit)"
                    )))
                }
                _ => return Err(bad(&format!("unknown parameter `{kv}` (known: table)"))),
            }
        }
        Ok(SinkUrl {
            path: PathBuf::from(path),
            table,
        })
    }
}

fn valid_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// A name quoted for SQL.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The SQLite type of an Arrow column.
fn sql_type(t: &DataType) -> &'static str {
    match t {
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Timestamp(_, _) => "INTEGER",
        DataType::Float16 | DataType::Float32 | DataType::Float64 => "REAL",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BLOB",
        _ => "TEXT",
    }
}

/// `col` cast to `T` exactly (a value that does not fit is an error, never
/// NULL or wrapped), each value mapped by `f`.
fn cast_map<T: arrow::array::ArrowPrimitiveType>(
    col: &ArrayRef,
    f: impl Fn(T::Native) -> Value,
) -> std::result::Result<Vec<Value>, arrow::error::ArrowError> {
    let exact = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let a = arrow::compute::cast_with_options(col, &T::DATA_TYPE, &exact)?;
    let a = a.as_primitive::<T>();
    Ok((0..a.len())
        .map(|i| match a.is_null(i) {
            false => f(a.value(i)),
            true => Value::Null,
        })
        .collect())
}

/// One column's values as SQLite values; a value its SQLite type cannot hold
/// is an error.
fn values(col: &ArrayRef) -> std::result::Result<Vec<Value>, arrow::error::ArrowError> {
    use arrow::datatypes::{Float64Type, Int64Type};
    match col.data_type() {
        DataType::Boolean => {
            let a = col.as_boolean();
            Ok((0..a.len())
                .map(|i| match a.is_null(i) {
                    false => Value::Integer(a.value(i) as i64),
                    true => Value::Null,
                })
                .collect())
        }
        DataType::Timestamp(_, _) => to_millis(col.as_ref()).map(|ms| {
            ms.iter()
                .map(|v| v.map_or(Value::Null, Value::Integer))
                .collect()
        }),
        t if sql_type(t) == "INTEGER" => cast_map::<Int64Type>(col, Value::Integer),
        t if sql_type(t) == "REAL" => cast_map::<Float64Type>(col, Value::Real),
        t if sql_type(t) == "BLOB" => arrow::compute::cast(col, &DataType::Binary).map(|a| {
            a.as_binary::<i32>()
                .iter()
                .map(|v| v.map_or(Value::Null, |b| Value::Blob(b.to_vec())))
                .collect()
        }),
        _ => ArrayFormatter::try_new(col.as_ref(), &FormatOptions::default()).map(|f| {
            (0..col.len())
                .map(|i| match col.is_null(i) {
                    false => Value::Text(f.value(i).to_string()),
                    true => Value::Null,
                })
                .collect()
        }),
    }
}

/// A keyed, exactly-once sink into a SQLite table.
pub struct SqliteSink {
    conn: rusqlite::Connection,
    path: PathBuf,
    table: String,
    schema: SchemaRef,
    mode: OutputMode,
    /// Columns the upsert conflicts on (Update mode with a key).
    conflict: Option<Vec<String>>,
    /// The last epoch applied.
    applied: u64,
}

impl SqliteSink {
    /// Open (or create) `url`'s database and table for a view emitting
    /// `schema` in `mode`, whose rows are keyed by `key` (column names; the
    /// window bounds are added) or not (`None`). `run` identifies the run the
    /// epochs belong to: a table whose sink state names another run is
    /// refused (`fresh`: this run starts at epoch 1 with nothing applied, so a
    /// table that holds any applied epoch is refused too).
    pub fn open(
        url: &SinkUrl,
        view: &str,
        schema: SchemaRef,
        mode: OutputMode,
        key: Option<Vec<String>>,
        run: &str,
        fresh: bool,
    ) -> Result<Self> {
        let table = url.table.clone().unwrap_or_else(|| view.to_string());
        let err = |m: String| Error::Output {
            path: url.path.clone(),
            message: format!("table `{table}`: {m}"),
        };
        let db = |e: rusqlite::Error| err(e.to_string());
        let conn = rusqlite::Connection::open(&url.path).map_err(db)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS _thund_sink (\
             sink_table TEXT PRIMARY KEY, run TEXT NOT NULL, epoch INTEGER NOT NULL)",
        )
        .map_err(db)?;
        let bounds = ["window_start", "window_end"]
            .into_iter()
            .filter(|b| schema.field_with_name(b).is_ok())
            .map(str::to_string);
        let conflict = match (mode, key) {
            (OutputMode::Update, Some(k)) => Some(bounds.chain(k).collect::<Vec<_>>()),
            _ => None,
        };
        // the table: create it, or check the one there
        let cols: Vec<(String, &'static str)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), sql_type(f.data_type())))
            .collect();
        let mut stmt = conn
            .prepare(&format!("PRAGMA table_info({})", quote(&table)))
            .map_err(db)?;
        let existing: Vec<(String, String)> = stmt
            .query_map([], |r| Ok((r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
            .map_err(db)?
            .collect::<std::result::Result<_, _>>()
            .map_err(db)?;
        drop(stmt);
        if existing.is_empty() {
            let mut ddl: Vec<String> = cols
                .iter()
                .map(|(n, t)| format!("{} {t}", quote(n)))
                .collect();
            if let Some(c) = &conflict {
                let k: Vec<String> = c.iter().map(|n| quote(n)).collect();
                ddl.push(format!("PRIMARY KEY ({})", k.join(", ")));
            }
            conn.execute_batch(&format!(
                "CREATE TABLE {} ({})",
                quote(&table),
                ddl.join(", ")
            ))
            .map_err(db)?;
        } else {
            let want: Vec<(String, String)> = cols
                .iter()
                .map(|(n, t)| (n.clone(), t.to_string()))
                .collect();
            if existing != want {
                let show = |v: &[(String, String)]| {
                    v.iter()
                        .map(|(n, t)| format!("{n} {t}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(err(format!(
                    "exists with columns ({}), but the view emits ({}): drop it or sink into another table",
                    show(&existing),
                    show(&want)
                )));
            }
        }
        let state: Option<(String, i64)> = conn
            .query_row(
                "SELECT run, epoch FROM _thund_sink WHERE sink_table = ?1",
                [&table],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(db)?;
        let applied = match state {
            None => 0,
            Some((r, e)) if r == run && !(fresh && e > 0) => e.max(0) as u64,
            Some((r, e)) => {
                return Err(err(format!(
                    "holds epochs 1..={e} of another run ({r}); this run ({run}) would write \
                     over them: sink into another table, or resume that run"
                )))
            }
        };
        Ok(SqliteSink {
            conn,
            path: url.path.clone(),
            table,
            schema,
            mode,
            conflict,
            applied,
        })
    }

    /// The last epoch applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Apply `epoch`'s rows in one transaction with the sink state; an
    /// epoch at or below the last applied is skipped (a replay). Returns
    /// whether it was applied.
    pub fn write(&mut self, epoch: u64, run: &str, batches: &[RecordBatch]) -> Result<bool> {
        if epoch <= self.applied {
            return Ok(false);
        }
        let err = |e: rusqlite::Error| Error::Output {
            path: self.path.clone(),
            message: format!("table `{}`: {e}", self.table),
        };
        let tx = self.conn.transaction().map_err(err)?;
        let t = quote(&self.table);
        let names: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| quote(f.name()))
            .collect();
        let marks: Vec<String> = (1..=names.len()).map(|i| format!("?{i}")).collect();
        let mut insert = format!(
            "INSERT INTO {t} ({}) VALUES ({})",
            names.join(", "),
            marks.join(", ")
        );
        if let Some(c) = &self.conflict {
            let keys: Vec<String> = c.iter().map(|n| quote(n)).collect();
            let set: Vec<String> = names
                .iter()
                .filter(|n| !keys.contains(n))
                .map(|n| format!("{n} = excluded.{n}"))
                .collect();
            insert.push_str(&format!(" ON CONFLICT ({}) DO ", keys.join(", ")));
            insert.push_str(&match set.is_empty() {
                true => "NOTHING".to_string(),
                false => format!("UPDATE SET {}", set.join(", ")),
            });
        }
        if self.mode == OutputMode::Complete {
            tx.execute(&format!("DELETE FROM {t}"), []).map_err(err)?;
        }
        let fin = self
            .schema
            .index_of("final")
            .ok()
            .filter(|_| self.mode == OutputMode::Update);
        let bounds = (
            self.schema.index_of("window_start").ok(),
            self.schema.index_of("window_end").ok(),
        );
        {
            let mut ins = tx.prepare_cached(&insert).map_err(err)?;
            // the windows whose rows this epoch's final rows replace (few)
            let mut cleared: Vec<(Value, Value)> = Vec::new();
            for b in batches {
                let cols: Vec<Vec<Value>> = b
                    .columns()
                    .iter()
                    .zip(self.schema.fields())
                    .map(|(c, f)| {
                        values(c).map_err(|e| Error::Output {
                            path: self.path.clone(),
                            message: format!(
                                "table `{}`: column `{}` ({}): {e}",
                                self.table,
                                f.name(),
                                c.data_type()
                            ),
                        })
                    })
                    .collect::<Result<_>>()?;
                for i in 0..b.num_rows() {
                    let is_final = fin.is_some_and(|c| cols[c][i] == Value::Integer(1));
                    if let (true, (Some(s), Some(e))) = (is_final, bounds) {
                        let w = (cols[s][i].clone(), cols[e][i].clone());
                        if !cleared.contains(&w) {
                            tx.execute(
                                &format!(
                                    "DELETE FROM {t} WHERE \"window_start\" = ?1 AND \"window_end\" = ?2"
                                ),
                                [&w.0, &w.1],
                            )
                            .map_err(err)?;
                            cleared.push(w);
                        }
                    }
                    let row: Vec<&Value> = cols.iter().map(|c| &c[i]).collect();
                    ins.execute(rusqlite::params_from_iter(row)).map_err(err)?;
                }
            }
        }
        tx.execute(
            "INSERT INTO _thund_sink (sink_table, run, epoch) VALUES (?1, ?2, ?3) \
             ON CONFLICT (sink_table) DO UPDATE SET run = excluded.run, epoch = excluded.epoch",
            rusqlite::params![self.table, run, epoch as i64],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        self.applied = epoch;
        Ok(true)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_do_not_fit_sqlite_are_errors_not_nulls() {
        let big: ArrayRef = std::sync::Arc::new(arrow::array::UInt64Array::from(vec![
            Some(7),
            None,
            Some(u64::MAX),
        ]));
        let err = values(&big).expect_err("u64::MAX is no SQLite INTEGER");
        assert!(err.to_string().contains("18446744073709551615"), "{err}");
        let fits: ArrayRef =
            std::sync::Arc::new(arrow::array::UInt64Array::from(vec![Some(7), None]));
        assert_eq!(
            values(&fits).expect("fits"),
            [Value::Integer(7), Value::Null]
        );
    }
}
