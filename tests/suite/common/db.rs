//! The databases the sink tests write into, read back as text rows in the
//! form `canon` gives Arrow rows (timestamps and booleans as integers,
//! floats as `{:.9e}`, NULL as `NULL`), sorted.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The rows of `table` in a SQLite file.
pub fn sqlite_rows(db: &Path, table: &str) -> Vec<String> {
    use rusqlite::types::Value;
    let conn = rusqlite::Connection::open(db).expect("db");
    let mut stmt = conn
        .prepare(&format!("SELECT * FROM {table}"))
        .expect("table");
    let n = stmt.column_count();
    let mut rows: Vec<String> = stmt
        .query_map([], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, Value>(i).map(|v| match v {
                        Value::Null => "NULL".to_string(),
                        Value::Integer(x) => x.to_string(),
                        Value::Real(x) => format!("{x:.9e}"),
                        Value::Text(s) => s,
                        Value::Blob(b) => format!("{b:?}"),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|c| c.join("|"))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    rows.sort();
    rows
}

/// The PostgreSQL server the suite writes into: `THUND_PG_URL`, which
/// `./test.sh` sets after starting a server on 127.0.0.1. Without it the
/// test fails saying so: a PostgreSQL test never passes by not running.
pub fn pg_url() -> String {
    match std::env::var("THUND_PG_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => panic!(
            "THUND_PG_URL is not set: the PostgreSQL sink tests need a server. \
             ./test.sh starts one on 127.0.0.1 (PostgreSQL 15+, `apt-get install postgresql`); \
             or set THUND_PG_URL=postgres://user@127.0.0.1:port/db"
        ),
    }
}

/// A table name no other test of this process or of another run uses.
pub fn pg_table(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// `pg_url()` with `?table=name`.
pub fn pg_sink(table: &str) -> String {
    let url = pg_url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}table={table}")
}

/// A client of [`pg_url`].
pub fn pg_client() -> postgres::Client {
    postgres::Client::connect(&pg_url(), postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to THUND_PG_URL ({}): {e}", pg_url()))
}

/// The rows of `table` on the PostgreSQL server.
pub fn pg_rows(table: &str) -> Vec<String> {
    let mut c = pg_client();
    let cols: Vec<(String, String)> = c
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            &[&table],
        )
        .expect("columns")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(!cols.is_empty(), "no table {table}");
    let select: Vec<String> = cols
        .iter()
        .map(|(n, t)| match t.as_str() {
            t if t.starts_with("timestamp") => {
                format!("((extract(epoch from \"{n}\") * 1000)::bigint)::text")
            }
            "boolean" => format!("(\"{n}\"::int)::text"),
            "double precision" => format!("\"{n}\""),
            _ => format!("\"{n}\"::text"),
        })
        .collect();
    let rows = c
        .query(
            &format!("SELECT {} FROM \"{table}\"", select.join(", ")),
            &[],
        )
        .expect("rows");
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            cols.iter()
                .enumerate()
                .map(|(i, (_, t))| match t.as_str() {
                    "double precision" => r
                        .get::<_, Option<f64>>(i)
                        .map_or("NULL".to_string(), |x| format!("{x:.9e}")),
                    _ => r
                        .get::<_, Option<String>>(i)
                        .unwrap_or_else(|| "NULL".to_string()),
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    out.sort();
    out
}
