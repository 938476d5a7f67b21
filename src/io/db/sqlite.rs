//! The SQLite database of a [`DbSink`](super::DbSink) (compiled in).
//!
//! Column types: integers and booleans `INTEGER`, floats `REAL`, timestamps
//! `INTEGER` milliseconds since the Unix epoch, dates, decimals and strings
//! `TEXT` (decimals exactly as written), binary `BLOB`. The upsert key is
//! the table's primary key; SQLite keeps NULLs in it distinct, so a row with
//! a NULL group key is inserted, not updated.

use std::path::Path;

use arrow::datatypes::DataType;
use rusqlite::types::Value;

use super::{Backend, Cell, Epoch, Op, Stored};

/// A SQLite file.
pub(crate) struct Sqlite {
    conn: rusqlite::Connection,
}

fn text(e: rusqlite::Error) -> String {
    e.to_string()
}

impl Sqlite {
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        let conn = rusqlite::Connection::open(path).map_err(text)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(text)?;
        Ok(Sqlite { conn })
    }
}

/// SQLite's i-th placeholder.
fn placeholder(i: usize) -> String {
    format!("?{i}")
}

/// `table`'s sink state, if it has one.
fn read_state(conn: &rusqlite::Connection, table: &str) -> Result<Option<(String, i64)>, String> {
    conn.query_row(&super::state_sql(placeholder), [table], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .map(Some)
    .or_else(|e| match e {
        rusqlite::Error::QueryReturnedNoRows => Ok(None),
        e => Err(text(e)),
    })
}

fn value(c: &Cell) -> Value {
    match c {
        Cell::Null => Value::Null,
        Cell::Bool(b) => Value::Integer(*b as i64),
        Cell::Int(i) => Value::Integer(*i),
        Cell::Real(x) => Value::Real(*x),
        Cell::Text(s) => Value::Text(s.clone()),
        Cell::Blob(b) => Value::Blob(b.clone()),
    }
}

impl Backend for Sqlite {
    fn column(&self, t: &DataType) -> (Stored, String) {
        let (s, name) = match t {
            DataType::Boolean => (Stored::Bool, "INTEGER"),
            t if t.is_integer() => (Stored::Int, "INTEGER"),
            DataType::Timestamp(_, _) => (Stored::Millis, "INTEGER"),
            DataType::Float16 | DataType::Float32 | DataType::Float64 => (Stored::Real, "REAL"),
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                (Stored::Blob, "BLOB")
            }
            _ => (Stored::Text, "TEXT"),
        };
        (s, name.to_string())
    }

    fn execute(&mut self, sql: &str) -> Result<(), String> {
        self.conn.execute_batch(sql).map_err(text)
    }

    fn columns(&mut self, table: &str) -> Result<Vec<(String, String)>, String> {
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info({})", super::quote(table)))
            .map_err(text)?;
        let rows: Vec<(String, String)> = stmt
            .query_map([], |r| Ok((r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
            .map_err(text)?
            .collect::<Result<_, _>>()
            .map_err(text)?;
        Ok(rows)
    }

    fn state(&mut self, table: &str) -> Result<Option<(String, i64)>, String> {
        read_state(&self.conn, table)
    }

    fn key_clause(&self, keys: &[String]) -> String {
        let k: Vec<String> = keys.iter().map(|n| super::quote(n)).collect();
        format!("PRIMARY KEY ({})", k.join(", "))
    }

    fn claim(&mut self, table: &str, run: &str) -> Result<(), String> {
        self.conn
            .execute(&super::claim_sql(placeholder), [table, run])
            .map(|_| ())
            .map_err(text)
    }

    fn apply(&mut self, e: Epoch<'_>) -> Result<Option<i64>, String> {
        let mark = |i: usize, _: &super::Column| placeholder(i);
        let (insert, clear_window, clear) = (e.insert(mark), e.clear_window(mark), e.clear());
        // IMMEDIATE: the state read and the writes are one writer's
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(text)?;
        let state = read_state(&tx, e.table)?;
        let now = state.as_ref().map(|(_, n)| *n);
        if !super::check_state(state, e.run, e.epoch)? {
            return Ok(now);
        }
        {
            let mut ins = tx.prepare_cached(&insert).map_err(text)?;
            let mut rows = 0u64;
            for op in &e.ops {
                match op {
                    Op::Clear => {
                        tx.execute(&clear, []).map_err(text)?;
                    }
                    Op::ClearWindow(s, w) => {
                        let sql = clear_window
                            .as_deref()
                            .ok_or("final rows without windows")?;
                        tx.execute(sql, [value(s), value(w)]).map_err(text)?;
                    }
                    Op::Row(cells) => {
                        rows += 1;
                        // SQLite stores a NaN as NULL: a value it cannot hold
                        let mut all = cells.iter().zip(e.columns);
                        if let Some((_, col)) =
                            all.find(|(c, _)| matches!(c, Cell::Real(x) if x.is_nan()))
                        {
                            return Err(format!(
                                "column `{}`, row {rows} of epoch {}: the value is NaN, which \
                                 SQLite cannot store (it would store NULL; NULLIF(x, 'NaN') \
                                 in the view makes it one) — nothing of the epoch was written",
                                col.name, e.epoch
                            ));
                        }
                        ins.execute(rusqlite::params_from_iter(cells.iter().map(value)))
                            .map_err(text)?;
                    }
                }
            }
        }
        tx.execute(
            &super::set_state_sql(placeholder),
            rusqlite::params![e.table, e.run, e.epoch],
        )
        .map_err(text)?;
        tx.commit().map_err(text)?;
        Ok(None)
    }
}
