//! The PostgreSQL database of a [`DbSink`](super::DbSink) (cargo feature
//! `postgres`; PostgreSQL 15 or later, without TLS).
//!
//! Column types: booleans `BOOLEAN`, integers `BIGINT` (an unsigned value
//! above `i64::MAX` is an error), floats `DOUBLE PRECISION`, timestamps
//! `TIMESTAMP` (`TIMESTAMPTZ` with a time zone), dates `DATE`, decimals
//! `NUMERIC(p, s)` (exactly as written), strings `TEXT`, binary `BYTEA`,
//! anything else `TEXT` in Arrow's display form. The upsert key is a
//! `UNIQUE NULLS NOT DISTINCT` constraint, so a NULL group key is one key
//! here (unlike SQLite). The sink-state row exists from the sink's opening
//! on, and each epoch's transaction first locks it (`SELECT … FOR UPDATE`):
//! a commit of a killed process that lands after a restarted one read the
//! state is seen there, and its epoch is not applied twice.

use arrow::datatypes::DataType;
use postgres::types::ToSql;

use super::{Backend, Cell, Column, Epoch, Op, Stored};

/// A connection to a PostgreSQL server.
pub(crate) struct Postgres {
    client: postgres::Client,
}

fn text(e: postgres::Error) -> String {
    // the server's own message, when there is one
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

impl Postgres {
    pub(crate) fn open(url: &str) -> Result<Self, String> {
        let client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|e| format!("cannot connect: {}", text(e)))?;
        Ok(Postgres { client })
    }
}

/// PostgreSQL's i-th placeholder.
fn placeholder(i: usize) -> String {
    format!("${i}")
}

/// The placeholder of a column's value: typed, so a NULL needs no guessing.
fn mark(i: usize, c: &Column) -> String {
    let sql_type = &c.sql_type;
    match c.stored {
        Stored::Bool => format!("${i}::boolean"),
        Stored::Int => format!("${i}::bigint"),
        Stored::Real => format!("${i}::float8"),
        Stored::Blob => format!("${i}::bytea"),
        Stored::Millis | Stored::Text => format!("${i}::text::{sql_type}"),
    }
}

/// A cell as a parameter of the placeholder [`mark`] gives its column.
fn param(c: &Cell, s: Stored) -> Box<dyn ToSql + Sync> {
    match (c, s) {
        (Cell::Bool(b), _) => Box::new(*b),
        (Cell::Int(i), _) => Box::new(*i),
        (Cell::Real(x), _) => Box::new(*x),
        (Cell::Text(t), _) => Box::new(t.clone()),
        (Cell::Blob(b), _) => Box::new(b.clone()),
        (Cell::Null, Stored::Bool) => Box::new(None::<bool>),
        (Cell::Null, Stored::Int) => Box::new(None::<i64>),
        (Cell::Null, Stored::Real) => Box::new(None::<f64>),
        (Cell::Null, Stored::Blob) => Box::new(None::<Vec<u8>>),
        (Cell::Null, Stored::Millis | Stored::Text) => Box::new(None::<String>),
    }
}

impl Backend for Postgres {
    fn column(&self, t: &DataType) -> (Stored, String) {
        let (s, name) = match t {
            DataType::Boolean => (Stored::Bool, "boolean".to_string()),
            t if t.is_integer() => (Stored::Int, "bigint".to_string()),
            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                (Stored::Real, "double precision".to_string())
            }
            // the display form (RFC 3339) is exact at any unit PostgreSQL keeps
            DataType::Timestamp(_, None) => {
                (Stored::Text, "timestamp without time zone".to_string())
            }
            DataType::Timestamp(_, Some(_)) => {
                (Stored::Text, "timestamp with time zone".to_string())
            }
            DataType::Date32 | DataType::Date64 => (Stored::Text, "date".to_string()),
            DataType::Decimal32(p, s)
            | DataType::Decimal64(p, s)
            | DataType::Decimal128(p, s)
            | DataType::Decimal256(p, s) => (Stored::Text, format!("numeric({p}, {s})")),
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                (Stored::Blob, "bytea".to_string())
            }
            _ => (Stored::Text, "text".to_string()),
        };
        (s, name)
    }

    fn execute(&mut self, sql: &str) -> Result<(), String> {
        self.client.batch_execute(sql).map_err(text)
    }

    fn columns(&mut self, table: &str) -> Result<Vec<(String, String)>, String> {
        let rows = self
            .client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 \
                 ORDER BY ordinal_position",
                &[&table],
            )
            .map_err(text)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn state(&mut self, table: &str) -> Result<Option<(String, i64)>, String> {
        let row = self
            .client
            .query_opt(&super::state_sql(placeholder), &[&table])
            .map_err(text)?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    fn key_clause(&self, keys: &[String]) -> String {
        let k: Vec<String> = keys.iter().map(|n| super::quote(n)).collect();
        format!("UNIQUE NULLS NOT DISTINCT ({})", k.join(", "))
    }

    fn claim(&mut self, table: &str, run: &str) -> Result<(), String> {
        self.client
            .execute(&super::claim_sql(placeholder), &[&table, &run])
            .map(|_| ())
            .map_err(text)
    }

    fn apply(&mut self, e: Epoch<'_>) -> Result<Option<i64>, String> {
        let insert = e.insert(mark);
        let clear_window = e.clear_window(mark);
        let clear = e.clear();
        let mut tx = self.client.transaction().map_err(text)?;
        // lock the sink's state: one writer per epoch, whatever else runs
        let state: Option<(String, i64)> = tx
            .query_opt(
                &format!("{} FOR UPDATE", super::state_sql(placeholder)),
                &[&e.table],
            )
            .map_err(text)?
            .map(|r| (r.get(0), r.get(1)));
        let now = state.as_ref().map(|(_, n)| *n);
        if !super::check_state(state, e.run, e.epoch)? {
            return Ok(now);
        }
        let ins = tx.prepare(&insert).map_err(text)?;
        let del = match (&clear_window, e.bounds()) {
            (Some(sql), Some((s, w))) => Some((tx.prepare(sql).map_err(text)?, s.stored, w.stored)),
            _ => None,
        };
        let mut rows = 0u64;
        for op in &e.ops {
            match op {
                Op::Clear => {
                    tx.execute(clear.as_str(), &[]).map_err(text)?;
                }
                Op::ClearWindow(s, w) => {
                    let (del, ss, ws) = del.as_ref().ok_or("final rows without windows")?;
                    let p = [param(s, *ss), param(w, *ws)];
                    let refs: Vec<&(dyn ToSql + Sync)> = p.iter().map(|b| b.as_ref()).collect();
                    tx.execute(del, &refs).map_err(text)?;
                }
                Op::Row(cells) => {
                    rows += 1;
                    for (c, col) in cells.iter().zip(e.columns) {
                        if matches!(c, Cell::Text(t) if t.contains('\0')) {
                            return Err(format!(
                                "column `{}`, row {rows} of epoch {}: the value holds a NUL \
                                 character, which PostgreSQL text cannot store (nothing of \
                                 the epoch was written)",
                                col.name, e.epoch
                            ));
                        }
                    }
                    let p: Vec<Box<dyn ToSql + Sync>> = cells
                        .iter()
                        .zip(e.columns)
                        .map(|(c, col)| param(c, col.stored))
                        .collect();
                    let refs: Vec<&(dyn ToSql + Sync)> = p.iter().map(|b| b.as_ref()).collect();
                    tx.execute(&ins, &refs).map_err(text)?;
                }
            }
        }
        tx.execute(
            &super::set_state_sql(placeholder),
            &[&e.table, &e.run, &e.epoch],
        )
        .map_err(text)?;
        tx.commit().map_err(text)?;
        Ok(None)
    }
}
