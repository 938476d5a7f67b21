//! Keyed sinks into a real database, exactly once: each epoch's rows and the
//! epoch number are written in one transaction together with a sink-state
//! row, so a replay after a crash skips the epochs already applied.
//!
//! Two databases: SQLite (compiled in, [`sqlite`]) and PostgreSQL 15 or
//! later (cargo feature `postgres`, [`postgres`]). Both apply the rows as the
//! view's table holds them ([`crate::Tables`]):
//!
//! * **Append**: inserted.
//! * **Update**: upserted on `(window_start, window_end, key columns)` when
//!   the view has a key (its `GROUP BY` columns); a window's final rows
//!   (`final = true`) first delete the window's rows, so what an open window
//!   no longer holds goes; a view without a key inserts its provisional rows.
//!   The bounds are the columns that show them, whatever their names; a
//!   windowed view that shows no bounds, and session windows (a session that
//!   grows is a new window, with no retraction of the old one), are refused.
//! * **Complete**: the table's rows are replaced by the epoch's.
//!
//! The sink creates its table from the view's output schema, or checks an
//! existing one and refuses a mismatch naming the columns (each database's
//! column types are in its module).
//!
//! The sink-state table `_thund_sink` holds, per sink table, the last epoch
//! applied and the run it belongs to (a caller-chosen identity, such as the
//! state root and the view's fingerprint): a table written by another run is
//! refused, never silently skipped into.

#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sqlite;

use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::error::{Error, Result};
use crate::spec::OutputMode;

/// Which database a [`SinkUrl`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (an absolute path).
    Sqlite(PathBuf),
    /// A PostgreSQL server: the connection URL without the `table` parameter.
    Postgres(String),
}

/// Where a database sink writes: `sqlite:///abs/path.db?table=name` or
/// `postgres://user[:password]@host[:port]/db?table=name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkUrl {
    /// The database.
    pub database: Database,
    /// The table; `None`: the view's name.
    pub table: Option<String>,
}

const FORMS: &str = "a database sink is `sqlite:///absolute/path.db?table=name` or \
                     `postgres://user@host:port/db?table=name`";

impl SinkUrl {
    /// Parse `sqlite:///abs/path.db[?table=name]` or
    /// `postgres[ql]://user[:password]@host[:port]/db[?table=name][&other libpq parameters]`.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |m: &str| Error::Output {
            path: PathBuf::from(redact(url)),
            message: format!("{m}: {FORMS}"),
        };
        let (postgres, rest) = if let Some(r) = url.strip_prefix("sqlite://") {
            (false, r)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (true, url)
        } else {
            return Err(bad("not a sqlite:// or postgres:// URL"));
        };
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let mut table = None;
        let mut others = Vec::new();
        for kv in query.into_iter().flat_map(|q| q.split('&')) {
            match kv.split_once('=') {
                Some(("table", t)) if valid_name(t) => table = Some(t.to_string()),
                Some(("table", t)) => {
                    return Err(bad(&format!(
                        "table `{t}` is not a name (letters, digits and _, not first a digit)"
                    )))
                }
                _ if postgres => others.push(kv),
                _ => return Err(bad(&format!("unknown parameter `{kv}` (known: table)"))),
            }
        }
        let database = if postgres {
            let conn = match others.is_empty() {
                true => path.to_string(),
                false => format!("{path}?{}", others.join("&")),
            };
            postgres_url(&conn).map_err(|m| bad(&m))?;
            Database::Postgres(conn)
        } else {
            if !path.starts_with('/') {
                return Err(bad("the path must be absolute"));
            }
            Database::Sqlite(PathBuf::from(path))
        };
        Ok(SinkUrl { database, table })
    }

    /// The SQLite file, for a SQLite sink.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.database {
            Database::Sqlite(p) => Some(p),
            Database::Postgres(_) => None,
        }
    }

    /// What errors name: the file, or the URL without its password.
    pub fn shown(&self) -> PathBuf {
        match &self.database {
            Database::Sqlite(p) => p.clone(),
            Database::Postgres(u) => PathBuf::from(redact(u)),
        }
    }
}

#[cfg(feature = "postgres")]
fn postgres_url(url: &str) -> std::result::Result<(), String> {
    let c = url
        .parse::<::postgres::Config>()
        .map_err(|e| format!("not a PostgreSQL URL ({e})"))?;
    if c.get_hosts().is_empty() {
        return Err("the URL names no host".into());
    }
    Ok(())
}

#[cfg(not(feature = "postgres"))]
fn postgres_url(_: &str) -> std::result::Result<(), String> {
    Err("this thund was built without PostgreSQL (build it with `--features postgres`)".into())
}

/// `url` with the password of its user part, if any, replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..auth_end].rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split_once(':').map_or(user, |(n, _)| n);
            format!("{scheme}://{name}:***@{host}{}", &rest[auth_end..])
        }
        _ => url.to_string(),
    }
}

fn valid_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// A name quoted for SQL (both databases quote with `"`).
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One value bound into a statement.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Cell {
    Null,
    Bool(bool),
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// `col` cast to `T` exactly (a value that does not fit is an error, never
/// NULL or wrapped), each value mapped by `f`.
fn cast_map<T: arrow::array::ArrowPrimitiveType>(
    col: &ArrayRef,
    f: impl Fn(T::Native) -> Cell,
) -> std::result::Result<Vec<Cell>, arrow::error::ArrowError> {
    let exact = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let a = arrow::compute::cast_with_options(col, &T::DATA_TYPE, &exact)?;
    let a = a.as_primitive::<T>();
    Ok((0..a.len())
        .map(|i| match a.is_null(i) {
            false => f(a.value(i)),
            true => Cell::Null,
        })
        .collect())
}

/// How a database stores one Arrow column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    Bool,
    /// Integers (cast exactly to i64).
    Int,
    /// Timestamps as i64 milliseconds since the Unix epoch.
    Millis,
    Real,
    Blob,
    /// Arrow's display form (dates, timestamps, decimals exactly as written).
    Text,
}

/// One column's values as stored; a value the stored type cannot hold is an
/// error.
pub(crate) fn cells(
    col: &ArrayRef,
    how: Stored,
) -> std::result::Result<Vec<Cell>, arrow::error::ArrowError> {
    use arrow::datatypes::{Float64Type, Int64Type};
    match how {
        Stored::Bool => {
            let a = arrow::compute::cast(col, &DataType::Boolean)?;
            let a = a.as_boolean();
            Ok((0..a.len())
                .map(|i| match a.is_null(i) {
                    false => Cell::Bool(a.value(i)),
                    true => Cell::Null,
                })
                .collect())
        }
        Stored::Millis => crate::time::to_millis(col.as_ref())
            .map(|ms| ms.iter().map(|v| v.map_or(Cell::Null, Cell::Int)).collect()),
        Stored::Int => cast_map::<Int64Type>(col, Cell::Int),
        Stored::Real => cast_map::<Float64Type>(col, Cell::Real),
        Stored::Blob => arrow::compute::cast(col, &DataType::Binary).map(|a| {
            a.as_binary::<i32>()
                .iter()
                .map(|v| v.map_or(Cell::Null, |b| Cell::Blob(b.to_vec())))
                .collect()
        }),
        Stored::Text => {
            // PostgreSQL keeps microseconds and rounds finer digits, which can
            // carry a time across a window's bound (23:59:59.9999999 shown as
            // the next day): floored to the microsecond, as event times are
            let floored;
            let col = match col.data_type() {
                DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, tz) => {
                    use arrow::datatypes::{TimestampMicrosecondType, TimestampNanosecondType};
                    floored = std::sync::Arc::new(
                        col.as_primitive::<TimestampNanosecondType>()
                            .unary::<_, TimestampMicrosecondType>(|v| v.div_euclid(1000))
                            .with_timezone_opt(tz.clone()),
                    ) as ArrayRef;
                    &floored
                }
                _ => col,
            };
            text_cells(col)
        }
    }
}

/// A column's values in Arrow's display form.
fn text_cells(col: &ArrayRef) -> std::result::Result<Vec<Cell>, arrow::error::ArrowError> {
    ArrayFormatter::try_new(col.as_ref(), &FormatOptions::default()).map(|f| {
        (0..col.len())
            .map(|i| match col.is_null(i) {
                false => Cell::Text(f.value(i).to_string()),
                true => Cell::Null,
            })
            .collect()
    })
}

/// What one epoch does to the sink's table, in order.
#[derive(Debug, PartialEq)]
pub(crate) enum Op {
    /// Delete every row (Complete mode).
    Clear,
    /// Delete the rows of the window `(start, end)` (its final rows follow).
    ClearWindow(Cell, Cell),
    /// Insert (or, with a conflict key, upsert) a row.
    Row(Vec<Cell>),
}

/// A database the sink writes into: a connection and its dialect.
pub(crate) trait Backend: Send {
    /// How an Arrow column is stored, and the column type the table declares
    /// for it (as the database reports it back for an existing table).
    fn column(&self, t: &DataType) -> (Stored, String);
    /// Run DDL.
    fn execute(&mut self, sql: &str) -> std::result::Result<(), String>;
    /// `table`'s columns and their types, in order (empty: no such table).
    fn columns(&mut self, table: &str) -> std::result::Result<Vec<(String, String)>, String>;
    /// The sink state of `table`: the run and the last epoch applied.
    fn state(&mut self, table: &str) -> std::result::Result<Option<(String, i64)>, String>;
    /// The `CREATE TABLE` clause that makes `keys` the upsert key.
    fn key_clause(&self, keys: &[String]) -> String;
    /// Make `run` the owner of `table`'s sink state, at epoch 0, unless the
    /// state holds an applied epoch already.
    fn claim(&mut self, table: &str, run: &str) -> std::result::Result<(), String>;
    /// In one transaction that first locks the sink state: if it holds
    /// `epoch` already (a previous process of this run applied it, its
    /// commit landing after this one read the state), do nothing and return
    /// `Some(the epoch it holds)`; else do `ops` and set the state to
    /// (`run`, `epoch`). The state naming another run is an error.
    fn apply(&mut self, epoch: Epoch<'_>) -> std::result::Result<Option<i64>, String>;
}

/// A column of the sink's table.
#[derive(Clone, Debug)]
pub(crate) struct Column {
    pub name: String,
    pub stored: Stored,
    /// The type the table declares.
    pub sql_type: String,
}

/// One epoch for [`Backend::apply`].
pub(crate) struct Epoch<'a> {
    pub table: &'a str,
    pub columns: &'a [Column],
    pub conflict: Option<&'a [String]>,
    /// The columns of each row's window start and end, if the rows have windows.
    pub bounds: Option<(usize, usize)>,
    pub ops: Vec<Op>,
    pub run: &'a str,
    pub epoch: i64,
}

/// What [`Backend::apply`] found in the locked sink state: `Ok(true)` to
/// go on, `Ok(false)` when it holds the epoch already.
pub(crate) fn check_state(
    state: Option<(String, i64)>,
    run: &str,
    epoch: i64,
) -> std::result::Result<bool, String> {
    match state {
        Some((r, _)) if r != run => Err(format!(
            "another run ({r}) took the table over meanwhile; this run is {run}"
        )),
        Some((_, now)) => Ok(epoch > now),
        None => Ok(true),
    }
}

impl Epoch<'_> {
    /// The insert (or upsert), with `mark(i, column)` as the i-th (from 1)
    /// placeholder.
    pub fn insert(&self, mark: impl Fn(usize, &Column) -> String) -> String {
        let t = quote(self.table);
        let names: Vec<String> = self.columns.iter().map(|c| quote(&c.name)).collect();
        let marks: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| mark(i + 1, c))
            .collect();
        let mut sql = format!(
            "INSERT INTO {t} ({}) VALUES ({})",
            names.join(", "),
            marks.join(", ")
        );
        if let Some(c) = self.conflict {
            let keys: Vec<String> = c.iter().map(|n| quote(n)).collect();
            let set: Vec<String> = names
                .iter()
                .filter(|n| !keys.contains(n))
                .map(|n| format!("{n} = excluded.{n}"))
                .collect();
            sql.push_str(&format!(" ON CONFLICT ({}) DO ", keys.join(", ")));
            sql.push_str(&match set.is_empty() {
                true => "NOTHING".to_string(),
                false => format!("UPDATE SET {}", set.join(", ")),
            });
        }
        sql
    }

    /// The window bounds' columns (a view with windows has both).
    pub fn bounds(&self) -> Option<(&Column, &Column)> {
        let (s, e) = self.bounds?;
        self.columns.get(s).zip(self.columns.get(e))
    }

    /// The delete of one window's rows, with `mark` as in [`Self::insert`]
    /// (`None` without window bounds).
    pub fn clear_window(&self, mark: impl Fn(usize, &Column) -> String) -> Option<String> {
        let (s, e) = self.bounds()?;
        Some(format!(
            "DELETE FROM {} WHERE {} = {} AND {} = {}",
            quote(self.table),
            quote(&s.name),
            mark(1, s),
            quote(&e.name),
            mark(2, e)
        ))
    }

    /// The delete of every row.
    pub fn clear(&self) -> String {
        format!("DELETE FROM {}", quote(self.table))
    }
}

/// The claim of [`Backend::claim`], with `mark(i)` as the i-th placeholder
/// (the table, then the run).
fn claim_sql(mark: impl Fn(usize) -> String) -> String {
    format!(
        "INSERT INTO _thund_sink (sink_table, run, epoch) VALUES ({}, {}, 0) \
         ON CONFLICT (sink_table) DO UPDATE SET run = excluded.run WHERE _thund_sink.epoch = 0",
        mark(1),
        mark(2)
    )
}

/// The read of a table's sink state (`run`, `epoch`), with `mark(1)` as
/// the table's placeholder.
fn state_sql(mark: impl Fn(usize) -> String) -> String {
    format!(
        "SELECT run, epoch FROM _thund_sink WHERE sink_table = {}",
        mark(1)
    )
}

/// The write of a table's sink state, with `mark(i)` as the i-th
/// placeholder (the table, the run, the epoch).
fn set_state_sql(mark: impl Fn(usize) -> String) -> String {
    format!(
        "INSERT INTO _thund_sink (sink_table, run, epoch) VALUES ({}, {}, {}) \
         ON CONFLICT (sink_table) DO UPDATE SET run = excluded.run, epoch = excluded.epoch",
        mark(1),
        mark(2),
        mark(3)
    )
}

/// The sink-state table, in both databases' SQL.
const STATE_DDL: &str = "CREATE TABLE IF NOT EXISTS _thund_sink (\
     sink_table TEXT PRIMARY KEY, run TEXT NOT NULL, epoch BIGINT NOT NULL)";

/// A keyed, exactly-once sink into a database table.
pub struct DbSink {
    db: Box<dyn Backend>,
    shown: PathBuf,
    table: String,
    columns: Vec<Column>,
    mode: OutputMode,
    /// Columns the upsert conflicts on (Update mode with a key).
    conflict: Option<Vec<String>>,
    /// The columns of each row's window start and end (see [`DbSink::open`]).
    bounds: Option<(usize, usize)>,
    /// The last epoch applied.
    applied: u64,
}

impl DbSink {
    /// Open (or create) `url`'s database and table for a view emitting
    /// `schema` in `mode`, whose rows are keyed by `key` (column names; the
    /// window bounds are added) or not (`None`). `window` says where `schema`
    /// shows each row's window ([`crate::Engine::window_columns`]; `None`
    /// for a view without windows): in Update mode a window's rows are
    /// upserted on its bounds and the key, and its final rows replace them,
    /// so a windowed view that does not show both bounds is refused there,
    /// and so are sessions (a session that grows is a new window, and no
    /// retraction of the old one's rows comes: they would stay in the
    /// table). `run` identifies the run the
    /// epochs belong to: a table whose sink state names another run is
    /// refused (`fresh`: this run starts at epoch 1 with nothing applied, so a
    /// table that holds any applied epoch is refused too).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        url: &SinkUrl,
        view: &str,
        schema: SchemaRef,
        mode: OutputMode,
        key: Option<Vec<String>>,
        window: Option<crate::WindowColumns>,
        run: &str,
        fresh: bool,
    ) -> Result<Self> {
        let table = url.table.clone().unwrap_or_else(|| view.to_string());
        let shown = url.shown();
        let err = |m: String| Error::Output {
            path: shown.clone(),
            message: format!("table `{table}`: {m}"),
        };
        let bounds = match (window, mode) {
            (Some(w), OutputMode::Update) if w.sessions => {
                return Err(err(format!(
                    "view `{view}` has session windows: in Update mode a session that grows \
                     or merges is a new window, and no retraction of its earlier rows comes, \
                     so they would stay in the table beside its final row; sink it in \
                     Append or Complete mode"
                )))
            }
            (
                Some(crate::WindowColumns {
                    start: Some(s),
                    end: Some(e),
                    ..
                }),
                _,
            ) => {
                let at = |name: &str| {
                    schema.index_of(name).map_err(|_| {
                        err(format!(
                            "the window bound `{name}` is not a column of the view"
                        ))
                    })
                };
                Some((at(&s)?, at(&e)?))
            }
            (Some(_), OutputMode::Update) => {
                return Err(err(format!(
                    "view `{view}` does not show its window's bounds: in Update mode a \
                     window's rows are upserted on its bounds and the view's key, and its \
                     final rows replace them; select window_start and window_end (under any \
                     name)"
                )))
            }
            _ => None,
        };
        let mut db: Box<dyn Backend> = match &url.database {
            Database::Sqlite(path) => Box::new(sqlite::Sqlite::open(path).map_err(&err)?),
            #[cfg(feature = "postgres")]
            Database::Postgres(conn) => Box::new(postgres::Postgres::open(conn).map_err(&err)?),
            #[cfg(not(feature = "postgres"))]
            Database::Postgres(_) => return Err(err(postgres_url("").unwrap_err())),
        };
        db.execute(STATE_DDL).map_err(&err)?;
        let bound_names = bounds
            .into_iter()
            .flat_map(|(s, e)| [s, e])
            .map(|i| schema.field(i).name().clone());
        let conflict = match (mode, key) {
            (OutputMode::Update, Some(k)) => Some(bound_names.chain(k).collect::<Vec<_>>()),
            _ => None,
        };
        // the table: create it, or check the one there
        let columns: Vec<Column> = schema
            .fields()
            .iter()
            .map(|f| {
                let (stored, sql_type) = db.column(f.data_type());
                Column {
                    name: f.name().clone(),
                    stored,
                    sql_type,
                }
            })
            .collect();
        let existing = db.columns(&table).map_err(&err)?;
        let want: Vec<(String, String)> = columns
            .iter()
            .map(|c| (c.name.clone(), c.sql_type.clone()))
            .collect();
        if existing.is_empty() {
            let mut ddl: Vec<String> = want
                .iter()
                .map(|(n, t)| format!("{} {t}", quote(n)))
                .collect();
            if let Some(c) = &conflict {
                ddl.push(db.key_clause(c));
            }
            db.execute(&format!(
                "CREATE TABLE {} ({})",
                quote(&table),
                ddl.join(", ")
            ))
            .map_err(&err)?;
        } else if !same_columns(&existing, &want) {
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
        let applied = match db.state(&table).map_err(&err)? {
            None | Some((_, 0)) => {
                db.claim(&table, run).map_err(&err)?;
                0
            }
            Some((r, e)) if r == run && !(fresh && e > 0) => e.max(0) as u64,
            Some((r, e)) => {
                return Err(err(format!(
                    "holds epochs 1..={e} of another run ({r}); this run ({run}) would write \
                     over them: sink into another table, or resume that run"
                )))
            }
        };
        Ok(DbSink {
            db,
            shown,
            table,
            columns,
            mode,
            conflict,
            bounds,
            applied,
        })
    }

    /// The last epoch applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The table written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Apply `epoch`'s rows in one transaction with the sink state; an
    /// epoch at or below the last applied is skipped (a replay). Returns
    /// whether it was applied.
    pub fn write(&mut self, epoch: u64, run: &str, batches: &[RecordBatch]) -> Result<bool> {
        if epoch <= self.applied {
            return Ok(false);
        }
        let ops = self.plan(batches)?;
        let e = Epoch {
            table: &self.table,
            columns: &self.columns,
            conflict: self.conflict.as_deref(),
            bounds: self.bounds,
            ops,
            run,
            epoch: i64::try_from(epoch).unwrap_or(i64::MAX),
        };
        let held = self.db.apply(e).map_err(|m| Error::Output {
            path: self.shown.clone(),
            message: format!("table `{}`: {m}", self.table),
        })?;
        match held {
            Some(now) => {
                self.applied = now.max(0) as u64;
                Ok(false)
            }
            None => {
                self.applied = epoch;
                Ok(true)
            }
        }
    }

    /// The operations of one epoch's rows.
    fn plan(&self, batches: &[RecordBatch]) -> Result<Vec<Op>> {
        let mut ops = Vec::new();
        if self.mode == OutputMode::Complete {
            ops.push(Op::Clear);
        }
        let index = |name: &str| self.columns.iter().position(|c| c.name == name);
        let fin = index("final").filter(|_| self.mode == OutputMode::Update);
        let bounds = self.bounds;
        // the windows whose rows this epoch's final rows replace (few)
        let mut cleared: Vec<(Cell, Cell)> = Vec::new();
        for b in batches {
            let mut cols: Vec<std::vec::IntoIter<Cell>> = b
                .columns()
                .iter()
                .zip(&self.columns)
                .map(|(c, col)| {
                    cells(c, col.stored)
                        .map(Vec::into_iter)
                        .map_err(|e| Error::Output {
                            path: self.shown.clone(),
                            message: format!(
                                "table `{}`: column `{}` ({}): {e}",
                                self.table,
                                col.name,
                                c.data_type()
                            ),
                        })
                })
                .collect::<Result<_>>()?;
            for _ in 0..b.num_rows() {
                let row: Vec<Cell> = cols
                    .iter_mut()
                    .map(|c| c.next().unwrap_or(Cell::Null))
                    .collect();
                let is_final = fin.is_some_and(|c| row[c] == Cell::Bool(true));
                if let (true, Some((s, e))) = (is_final, bounds) {
                    let w = (row[s].clone(), row[e].clone());
                    if !cleared.contains(&w) {
                        ops.push(Op::ClearWindow(w.0.clone(), w.1.clone()));
                        cleared.push(w);
                    }
                }
                ops.push(Op::Row(row));
            }
        }
        Ok(ops)
    }
}

/// Whether an existing table's columns are the ones wanted (names exactly,
/// types without case or a precision the database adds).
fn same_columns(existing: &[(String, String)], want: &[(String, String)]) -> bool {
    let norm = |t: &str| {
        let t = t.to_ascii_lowercase();
        t.split('(').next().unwrap_or("").trim().to_string()
    };
    existing.len() == want.len()
        && existing
            .iter()
            .zip(want)
            .all(|((a, at), (b, bt))| a == b && norm(at) == norm(bt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_do_not_fit_are_errors_not_nulls() {
        let big: ArrayRef = std::sync::Arc::new(arrow::array::UInt64Array::from(vec![
            Some(7),
            None,
            Some(u64::MAX),
        ]));
        let err = cells(&big, Stored::Int).expect_err("u64::MAX is no i64");
        assert!(err.to_string().contains("18446744073709551615"), "{err}");
        let fits: ArrayRef =
            std::sync::Arc::new(arrow::array::UInt64Array::from(vec![Some(7), None]));
        assert_eq!(
            cells(&fits, Stored::Int).expect("fits"),
            [Cell::Int(7), Cell::Null]
        );
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact("postgres://me:secret@127.0.0.1:5432/db?table=t"),
            "postgres://me:***@127.0.0.1:5432/db?table=t"
        );
        assert_eq!(
            redact("postgres://me@127.0.0.1/db"),
            "postgres://me@127.0.0.1/db"
        );
    }
}
