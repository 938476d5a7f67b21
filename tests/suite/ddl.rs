//! A pipeline written as SQL DDL (`CREATE SOURCE … WATERMARK FOR …`,
//! `CREATE VIEW … AS …`) equals the same views built in Rust, trigger by
//! trigger; malformed DDL is an error naming the statement, line and column,
//! and the engine stays usable after it.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{canon, rng::SplitMix};
use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use thund::{Engine, Error, OutputMode, ViewSpec, WindowSpec};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

fn bids(r: &mut SplitMix, from: i64, n: usize) -> RecordBatch {
    let a: Vec<i64> = (0..n).map(|_| r.below(6) as i64).collect();
    let p: Vec<i64> = (0..n).map(|_| 1 + r.below(100) as i64).collect();
    let ts: Vec<i64> = (0..n)
        .map(|i| from + i as i64 * 40 - r.below(900) as i64)
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(a)),
            Arc::new(Int64Array::from(p)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .expect("batch")
}

const PIPELINE: &str = "
-- one source, three views over it
CREATE SOURCE bids (auction BIGINT, price BIGINT, ts TIMESTAMP,
                    WATERMARK FOR ts AS ts - INTERVAL '500' MILLISECOND) WITH (idle_timeout = '0s');
CREATE VIEW hot_items WITH (output = 'append') AS
  SELECT auction, window_start, window_end, COUNT(*) AS num
  FROM HOP(bids, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
  GROUP BY auction, window_start, window_end;
CREATE VIEW volume WITH (output = 'update', mode = 'recompute') AS
  SELECT window_start, window_end, SUM(price) AS volume, MAX(price) AS top
  FROM TUMBLE(bids, ts, INTERVAL '5' SECOND) GROUP BY window_start, window_end;
CREATE VIEW sessions WITH (output = 'complete') AS
  SELECT window_start, window_end, auction, COUNT(*) AS n
  FROM SESSION(bids, ts, INTERVAL '1' SECOND) GROUP BY auction, window_start, window_end
";

/// The same three views, built in Rust.
fn built() -> Vec<ViewSpec> {
    let s = Duration::from_secs;
    let v = |name: &str, sql: &str, w: WindowSpec, out: OutputMode| {
        ViewSpec::builder(name, sql)
            .source("bids", "ts", schema())
            .window(w)
            .allowed_lateness(Duration::from_millis(500))
            .output(out)
    };
    vec![
        v(
            "hot_items",
            "SELECT auction, COUNT(*) AS num FROM bids GROUP BY auction",
            WindowSpec::hopping(s(10), s(2)),
            OutputMode::Append,
        )
        .build()
        .expect("spec"),
        v(
            "volume",
            "SELECT SUM(price) AS volume, MAX(price) AS top FROM bids",
            WindowSpec::tumbling(s(5)),
            OutputMode::Update,
        )
        .mode(thund::ExecMode::Recompute)
        .build()
        .expect("spec"),
        v(
            "sessions",
            "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction",
            WindowSpec::session(s(1), &["auction"]),
            OutputMode::Complete,
        )
        .build()
        .expect("spec"),
    ]
}

#[test]
fn a_pipeline_in_sql_equals_the_same_views_built_in_rust() {
    let mut sql = Engine::builder().build().expect("engine");
    // (after a byte order mark, as editors on Windows save UTF-8)
    let names = sql
        .execute_sql(&format!("\u{feff}{PIPELINE}"))
        .expect("pipeline");
    assert_eq!(names, ["hot_items", "volume", "sessions"]);
    let mut rust = Engine::builder().build().expect("engine");
    for v in built() {
        rust.create_view(v).expect("view");
    }
    for name in &names {
        assert_eq!(
            sql.plan(name).expect("plan"),
            rust.plan(name).expect("plan"),
            "{name}"
        );
    }
    // `hot_items` selects its bounds after the key, as the query puts them
    let hot: Vec<String> = sql
        .output_schema("hot_items")
        .expect("schema")
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(hot, ["auction", "window_start", "window_end", "num"]);
    let mut r = SplitMix::new(3);
    let mut emitted = 0;
    for b in 0..30 {
        let batch = bids(&mut r, 1_000_000 + b * 400 * 40, 400);
        sql.push("bids", batch.clone()).expect("push");
        rust.push("bids", batch).expect("push");
        let (a, b) = (
            sql.trigger().expect("trigger"),
            rust.trigger().expect("trigger"),
        );
        for name in &names {
            let (x, y) = (a.view(name).expect("view"), b.view(name).expect("view"));
            let y_rows = if name == "hot_items" {
                // reorder the Rust view's `window_start, window_end, auction, num`
                canon(&y.output)
                    .iter()
                    .map(|row| {
                        let f: Vec<&str> = row.split('|').collect();
                        format!("{}|{}|{}|{}", f[2], f[0], f[1], f[3])
                    })
                    .collect::<Vec<_>>()
            } else {
                canon(&y.output)
            };
            let mut y_rows = y_rows;
            y_rows.sort();
            assert_eq!(canon(&x.output), y_rows, "{name}");
            emitted += x.output_rows();
        }
    }
    assert!(emitted > 100, "the stream closed windows: {emitted} rows");
}

/// Each malformed text, where its error must point, and what it must say.
#[test]
fn malformed_ddl_names_the_statement_and_the_token() {
    let good_source =
        "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);\n";
    let cases: &[(&str, (u64, u64), &[&str])] = &[
        (
            "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP);\nCREATE VIEW v AS SELECT COUNT(*) AS c FROM bids",
            (1, 50),
            &["statement 1", "declares no event time", "WATERMARK FOR"],
        ),
        (
            "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP,\n  WATERMARK FOR tz AS tz - INTERVAL '1' SECOND);",
            (2, 3),
            &["`tz`", "no such column"],
        ),
        (
            "CREATE SOURCE bids (auction BIGNUM, ts TIMESTAMP, WATERMARK FOR ts AS ts);",
            (1, 21),
            &["auction BIGNUM"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' MONTH);",
            (1, 60),
            &["the watermark's interval", "not a fixed duration"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (idle_timeout = '1 month');",
            (1, 65),
            &["idle_timeout `1 month`", "not a fixed duration"],
        ),
        // Flink's column forms Þund does not read, each said as such
        (
            "CREATE TABLE bids (ts TIMESTAMP(3), ts2 AS ts + INTERVAL '1' SECOND, WATERMARK FOR ts AS ts);",
            (1, 37),
            &["computed columns are not read", "in the view's query"],
        ),
        (
            "CREATE TABLE bids (ts TIMESTAMP(3), PRIMARY KEY (ts) NOT ENFORCED, WATERMARK FOR ts AS ts);",
            (1, 37),
            &["a source is append-only", "PRIMARY KEY"],
        ),
        (
            "CREATE TABLE bids (ts TIMESTAMP(3), part BIGINT METADATA FROM 'partition', WATERMARK FOR ts AS ts);",
            (1, 37),
            &["METADATA column"],
        ),
        // an option twice (the second place), a Flink connector's options
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (idle_timeout = '1s', 'IDLE_TIMEOUT' = '2s');",
            (1, 86),
            &["option `idle_timeout` is given twice"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'kafka', 'topic' = 'bids');",
            (1, 68),
            &["`connector` is a Flink connector option", "--input bids=FILE"],
        ),
        // too long: named in the statement that says it, not as a spec field
        // of the view that reads the source
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '9999999999999' DAY);\n\
             CREATE VIEW v AS SELECT COUNT(*) AS c FROM bids",
            (1, 60),
            &["statement 1", "the watermark's interval", "is too large"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (idle_timeout = '9999999999999d');\n\
             CREATE VIEW v AS SELECT COUNT(*) AS c FROM bids",
            (1, 65),
            &["statement 1", "idle_timeout `9999999999999d` is too large"],
        ),
        // unquoted names are read in lower case, as the view's SQL reads them
        (
            "CREATE SOURCE bids (auction BIGINT, Auction BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);",
            (1, 37),
            &["column `auction` is declared twice"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR \"TS\" AS \"TS\");",
            (1, 35),
            &["WATERMARK FOR `TS`", "no such column"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP, auction, WATERMARK FOR ts AS ts);",
            (1, 35),
            &["column `auction`", "type is missing"],
        ),
        (
            "CREATE SOURCE bids (ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (idle = '1s');",
            (1, 65),
            &["unknown source option `idle`", "idle_timeout"],
        ),
        (
            &format!("{good_source}CREATE VIEW v WITH (output = 'sometimes') AS SELECT COUNT(*) AS c FROM bids"),
            (2, 21),
            &["statement 2", "output `sometimes`", "append, update or complete"],
        ),
        (
            &format!("{good_source}CREATE VIEW v SELECT COUNT(*) AS c FROM bids"),
            (2, 15),
            &["expected the query after `AS`", "`SELECT`"],
        ),
        (
            &format!("{good_source}CREATE VIEW v AS SELECT COUNT(*) AS c FROM persons"),
            (2, 18),
            &["reads no declared source", "declared before it: bids"],
        ),
        // a literal no row can cast to its column's type: refused at its
        // statement (the view would fail at its first trigger with rows)
        (
            &format!("{good_source}CREATE VIEW v AS SELECT COUNT(*) AS c \
                 FROM TUMBLE(bids, ts, INTERVAL '1' SECOND) WHERE auction <> 'a;b'"),
            (2, 18),
            &["invalid SQL in view `v`", "Cannot cast string 'a;b'"],
        ),
        // a query that does not parse says so (it named no source before),
        // at the token in the text: a `PARTITION BY` of no column
        (
            &format!(
                "{good_source}CREATE VIEW v AS SELECT COUNT(*) AS c \
                 FROM SESSION(TABLE bids PARTITION BY, DESCRIPTOR(ts), INTERVAL '1' SECOND)"
            ),
            (2, 63),
            &["the query does not parse", "found: PARTITION at Line: 2, Column: 63"],
        ),
        // Flink's `PARTITION BY` is read, and must be grouped by
        (
            &format!(
                "{good_source}CREATE VIEW v AS SELECT COUNT(*) AS c \
                 FROM SESSION(TABLE bids PARTITION BY auction, DESCRIPTOR(ts), INTERVAL '1' SECOND)"
            ),
            (2, 44),
            &["(line 2, column 44): its PARTITION BY (auction) must be among the query's other GROUP BY columns (none): group by `auction` too"],
        ),
        // on a later line of the query, at its line and column in the text
        (
            &format!(
                "{good_source}CREATE VIEW v AS\n  SELECT COUNT(*) AS c\n  \
                 FROM SESSION(TABLE bids PARTITION BY auction, DESCRIPTOR(ts), INTERVAL '1' SECOND)"
            ),
            (4, 8),
            &["(line 4, column 8): its PARTITION BY (auction)"],
        ),
        // a view before its source, as a second text without its sources
        // would be: the source it reads is not declared yet
        (
            "CREATE VIEW v AS SELECT COUNT(*) AS c FROM bids;\n\
             CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);",
            (1, 18),
            &["reads no declared source", "no `CREATE SOURCE` comes before it"],
        ),
        (
            &format!("{good_source}CREATE INDEX i ON bids (auction)"),
            (2, 8),
            &["expected `SOURCE` (or Flink's `TABLE`) or `[MATERIALIZED] VIEW`", "`INDEX`"],
        ),
        // Flink's CREATE TABLE is a source: it needs its watermark
        (
            &format!("{good_source}CREATE TABLE t (a INT)"),
            (2, 23),
            &["source `t` declares no event time", "WATERMARK FOR"],
        ),
        (
            &format!("{good_source}CREATE MATERIALIZED TABLE t (a INT)"),
            (2, 21),
            &["after CREATE, found `TABLE`"],
        ),
        (
            &format!(
                "{good_source}CREATE VIEW v WITH (output = 'update') AS SELECT COUNT(*) AS c FROM bids;\n\
                 CREATE VIEW v AS SELECT 1 AS one FROM bids"
            ),
            (3, 13),
            &["statement 3", "view `v` is declared twice"],
        ),
        (
            "CREATE SOURCE a (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
             CREATE SOURCE b (ts TIMESTAMP, WATERMARK FOR ts AS ts);\n\
             CREATE VIEW v AS SELECT COUNT(*) AS c FROM a JOIN b ON a.ts = b.ts",
            (3, 18),
            &["whose watermarks differ"],
        ),
        (good_source, (1, 1), &["declares no view"]),
        // event time of a type no window takes: named at its WATERMARK, not
        // later as a spec field of the view that reads it
        (
            "CREATE SOURCE bids (ts VARCHAR, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
             CREATE VIEW v AS SELECT COUNT(*) AS c FROM bids",
            (1, 33),
            &["statement 1", "WATERMARK FOR `ts`: the column is Utf8", "TIMESTAMP, a DATE or an integer"],
        ),
        (
            "CREATE SOURCE bids (ts DOUBLE, WATERMARK FOR ts AS ts);",
            (1, 32),
            &["the column is Float64"],
        ),
        // what the engine refuses once the text parsed is placed in the
        // view's query too: a column its source does not declare, at the
        // column (the query shown as written); a column of a join found
        // twice, at its unqualified use; a qualified column, at its use with
        // that qualifier (the alias `price` is not it); a function DataFusion
        // does not know, at the call; a window a DATE column cannot bound,
        // at the query (the call named)
        (
            &format!(
                "{good_source}CREATE VIEW v WITH (output = 'update') AS\n  SELECT SUM(price) AS s \
                 FROM TUMBLE(bids, ts, INTERVAL '10' SECOND) GROUP BY window_start, window_end"
            ),
            (3, 14),
            &[
                "statement 2",
                "No field named price",
                "SQL: SELECT SUM(price) AS s FROM TUMBLE(bids, ts, INTERVAL '10' SECOND)",
            ],
        ),
        (
            &format!(
                "{good_source}CREATE VIEW v WITH (output = 'update') AS SELECT a.auction AS price\n\
                 FROM bids a JOIN bids b ON a.auction = b.auction\n  WHERE b.ts > 1 AND Auction > 2"
            ),
            (4, 22),
            &["Ambiguous reference to unqualified field auction"],
        ),
        (
            &format!(
                "{good_source}CREATE VIEW v WITH (output = 'update') AS SELECT a.auction AS price\n\
                 FROM bids a JOIN bids b ON a.auction = b.auction\n  WHERE a.ts > 1 AND b.price > 2"
            ),
            (4, 24),
            &["No field named b.price"],
        ),
        (
            &format!(
                "{good_source}CREATE VIEW v WITH (output = 'update') AS\n  SELECT auction, \
                 SUMM(auction) AS s FROM bids GROUP BY auction"
            ),
            (3, 19),
            &["Invalid function 'summ'"],
        ),
        (
            "CREATE SOURCE days (d DATE, WATERMARK FOR d AS d);\n\
             CREATE VIEW v AS SELECT COUNT(*) AS c FROM TUMBLE(days, d, INTERVAL '1' HOUR) \
             GROUP BY window_start, window_end",
            (2, 44),
            &[
                "statement 2",
                "`TUMBLE(days, d, INTERVAL '1' HOUR)` (line 2, column 44): its size, 1h, is not a \
                 whole number of days",
            ],
        ),
        // sources and views share one namespace, either way round
        (
            &format!("{good_source}CREATE VIEW Bids WITH (output = 'update') AS SELECT COUNT(*) AS c FROM bids"),
            (2, 13),
            &["statement 2", "`Bids` is the name of source `bids` already"],
        ),
        (
            &format!(
                "{good_source}CREATE VIEW v WITH (output = 'update') AS SELECT COUNT(*) AS c FROM bids;\n\
                 CREATE SOURCE v (ts TIMESTAMP, WATERMARK FOR ts AS ts)"
            ),
            (3, 15),
            &["statement 3", "`v` is the name of view `v` already"],
        ),
    ];
    // a byte order mark before the text (as editors on Windows save UTF-8)
    // moves no position: the first line's columns are counted after it
    let marked: Vec<(String, (u64, u64), &[&str])> = cases
        .iter()
        .map(|(t, at, w)| (format!("\u{feff}{t}"), *at, *w))
        .collect();
    let all = cases
        .iter()
        .map(|(t, at, w)| (*t, *at, *w))
        .chain(marked.iter().map(|(t, at, w)| (t.as_str(), *at, *w)));
    for (text, (line, column), wants) in all {
        let mut e = Engine::builder().build().expect("engine");
        let got = e.execute_sql(text);
        let Err(Error::Ddl {
            line: l,
            column: c,
            message,
            ..
        }) = &got
        else {
            panic!("{text}\n  gave {got:?}, not a DDL error");
        };
        assert_eq!((*l, *c), (line, column), "{text}\n  {message}");
        for w in wants {
            assert!(
                message.contains(w),
                "{text}\n  error: {message}\n  should contain: {w}"
            );
        }
        assert!(
            e.views().is_empty(),
            "nothing is created from a malformed text"
        );
        // the engine stays usable
        e.execute_sql(&format!("{good_source}CREATE VIEW ok WITH (output = 'update') AS SELECT COUNT(*) AS c FROM bids"))
            .expect("a good pipeline after a refused one");
    }
}

/// Column names are read as the view's SQL reads identifiers: unquoted in
/// lower case (`Auction` declares `auction`, which `SELECT Auction` finds),
/// quoted as written (`"Price"`); the pipeline equals the same view built in
/// Rust over a schema of those names.
#[test]
fn column_names_are_read_as_the_views_sql_reads_them() {
    let ddl = "CREATE SOURCE bids (Auction BIGINT, \"Price\" BIGINT, TS TIMESTAMP,
                                   WATERMARK FOR Ts AS TS - INTERVAL '500' MILLISECOND);
               CREATE VIEW v AS SELECT AUCTION, window_start, window_end, SUM(\"Price\") AS volume
               FROM TUMBLE(bids, ts, INTERVAL '5' SECOND) GROUP BY Auction, window_start, window_end";
    let mut sql = Engine::builder().build().expect("engine");
    sql.execute_sql(ddl).expect("pipeline");
    let named = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("Price", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let mut rust = Engine::builder().build().expect("engine");
    rust.create_view(
        ViewSpec::builder(
            "v",
            "SELECT auction, SUM(\"Price\") AS volume FROM bids GROUP BY auction",
        )
        .source("bids", "ts", named.clone())
        .window(WindowSpec::tumbling(Duration::from_secs(5)))
        .allowed_lateness(Duration::from_millis(500))
        .build()
        .expect("spec"),
    )
    .expect("view");
    assert_eq!(sql.plan("v").expect("plan"), rust.plan("v").expect("plan"));
    let mut r = SplitMix::new(5);
    let mut emitted = 0;
    for b in 0..20 {
        let batch = bids(&mut r, 1_000_000 + b * 400 * 40, 400);
        let batch = RecordBatch::try_new(named.clone(), batch.columns().to_vec()).expect("batch");
        sql.push("bids", batch.clone()).expect("push");
        rust.push("bids", batch).expect("push");
        let (a, b) = (
            sql.trigger().expect("trigger"),
            rust.trigger().expect("trigger"),
        );
        let (x, y) = (a.view("v").expect("view"), b.view("v").expect("view"));
        // the SQL view selects the key first, the Rust one its bounds first
        let mut y_rows: Vec<String> = canon(&y.output)
            .iter()
            .map(|row| {
                let f: Vec<&str> = row.split('|').collect();
                format!("{}|{}|{}|{}", f[2], f[0], f[1], f[3])
            })
            .collect();
        y_rows.sort();
        assert_eq!(canon(&x.output), y_rows);
        emitted += x.output_rows();
    }
    assert!(emitted > 20, "the stream closed windows: {emitted} rows");
    // DataFusion lower-cases the ASCII letters of a name only: `Ünit` is
    // `Ünit` to the view, and so to the source (it declared `ünit`, which the
    // view could not find)
    let mut e = Engine::builder().build().expect("engine");
    e.execute_sql(
        "CREATE SOURCE s (Ünit BIGINT, Ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE VIEW u WITH (output = 'update') AS SELECT ÜNIT, COUNT(*) AS n FROM s GROUP BY Ünit",
    )
    .expect("a name with a non-ASCII letter");
    let names: Vec<String> = e
        .output_schema("u")
        .expect("schema")
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["Ünit", "n", "final"]);
}

/// A pipeline whose second view the engine refuses (its query names no such
/// column: found when the view is planned, after the text parsed) creates
/// none of its views, and the engine stays usable.
#[test]
fn a_pipeline_refused_by_a_later_view_creates_none() {
    let source = "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);\n";
    let good = "CREATE VIEW a AS SELECT auction, window_start, COUNT(*) AS n \
                FROM TUMBLE(bids, ts, INTERVAL '1' SECOND) GROUP BY auction, window_start, window_end;\n";
    let bad = "CREATE VIEW b AS SELECT bidder, window_start, COUNT(*) AS n \
               FROM TUMBLE(bids, ts, INTERVAL '1' SECOND) GROUP BY bidder, window_start, window_end;\n";
    let mut e = Engine::builder().build().expect("engine");
    let err = e
        .execute_sql(&format!("{source}{good}{bad}"))
        .expect_err("b names no such column");
    assert!(err.to_string().contains("bidder"), "{err}");
    assert!(e.views().is_empty(), "created: {:?}", e.views());
    assert_eq!(
        e.execute_sql(&format!("{source}{good}")).expect("a alone"),
        ["a"]
    );
}

/// A source's name is read as SQL reads an identifier, in its declaration,
/// its window calls and its `FROM`s: quoted (`"Bids"`, `"my bids"`,
/// `"a.b"`, a keyword) as written, unquoted in any case. Each spelling of
/// a pipeline of a windowed view, a view without a window and a self-join
/// emits what the plain `bids` pipeline emits, on the same path.
#[test]
fn quoted_and_cased_source_names_are_read_as_sql_reads_them() {
    let pipeline = |decl: &str, read: &str| {
        format!(
            "CREATE SOURCE {decl} (auction BIGINT, price BIGINT, ts TIMESTAMP,
                 WATERMARK FOR ts AS ts - INTERVAL '500' MILLISECOND);
             CREATE VIEW w WITH (output = 'append') AS
               SELECT window_start, auction, SUM(price) AS volume
               FROM TUMBLE({read}, ts, INTERVAL '2' SECOND) GROUP BY window_start, auction;
             CREATE VIEW all_time WITH (output = 'update') AS
               SELECT auction, COUNT(*) AS n FROM {read} GROUP BY auction;
             CREATE VIEW pairs WITH (output = 'append') AS
               SELECT a.window_start, a.auction, COUNT(*) AS n
               FROM TUMBLE({read}, ts, INTERVAL '2' SECOND) a
               JOIN TUMBLE({read}, ts, INTERVAL '2' SECOND) b
                 ON a.window_start = b.window_start AND a.auction = b.auction AND a.price < b.price
               GROUP BY a.window_start, a.auction;"
        )
    };
    // each view's output at every trigger, and its path
    let run = |sql: &str, source: &str| {
        let mut e = Engine::builder().build().expect("engine");
        e.execute_sql(sql)
            .unwrap_or_else(|err| panic!("{err}\n{sql}"));
        let paths: Vec<_> = ["w", "all_time", "pairs"]
            .iter()
            .map(|v| e.plan(v).expect("plan").path())
            .collect();
        let mut r = SplitMix::new(17);
        let mut outs = Vec::new();
        for b in 0..8 {
            e.push(source, bids(&mut r, 1_000_000 + b * 100 * 40, 100))
                .expect("push");
            let t = e.trigger().expect("trigger");
            outs.extend(t.views.iter().map(|v| (v.view.clone(), canon(&v.output))));
        }
        (paths, outs)
    };
    let want = run(&pipeline("bids", "bids"), "bids");
    assert!(want.1.iter().any(|(_, rows)| !rows.is_empty()));
    for (decl, read, source) in [
        ("Bids", "BIDS", "Bids"),
        ("\"Bids\"", "\"Bids\"", "Bids"),
        ("\"my bids\"", "\"my bids\"", "my bids"),
        ("\"a.b\"", "\"a.b\"", "a.b"),
        ("\"order\"", "\"order\"", "order"),
    ] {
        assert_eq!(run(&pipeline(decl, read), source), want, "{decl}");
    }
}

/// A watermark without delay may be written with a zero interval, as Flink
/// allows (`ts - INTERVAL '0' SECOND` is `ts`); a window's size may not be zero.
#[test]
fn a_zero_watermark_delay_is_the_event_time_itself() {
    let pipeline = |wm: &str| {
        format!(
            "CREATE SOURCE bids (auction BIGINT, price BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS {wm});
             CREATE VIEW v WITH (output = 'append') AS SELECT window_start, auction, COUNT(*) AS n
             FROM TUMBLE(bids, ts, INTERVAL '2' SECOND) GROUP BY window_start, auction;"
        )
    };
    let explain = |wm: &str| {
        let mut e = Engine::builder().build().expect("engine");
        e.execute_sql(&pipeline(wm))
            .unwrap_or_else(|err| panic!("{wm}: {err}"));
        e.explain("v").expect("explain")
    };
    let want = explain("ts");
    assert!(want.contains("max event time - 0s"), "{want}");
    for wm in ["ts - INTERVAL '0' SECOND", "ts - INTERVAL '0 seconds'"] {
        assert_eq!(explain(wm), want, "{wm}");
    }
    // Flink's CREATE TABLE and Materialize's CREATE MATERIALIZED VIEW
    let flink = pipeline("ts")
        .replace("CREATE SOURCE", "CREATE TABLE")
        .replace("CREATE VIEW", "CREATE MATERIALIZED VIEW");
    let mut e = Engine::builder().build().expect("engine");
    e.execute_sql(&flink)
        .expect("CREATE TABLE, CREATE MATERIALIZED VIEW");
    assert_eq!(e.explain("v").expect("explain"), want);
    // options keyed as Flink quotes them
    let quoted = pipeline("ts").replace("AS ts);", "AS ts) WITH ('idle_timeout' = '30s');");
    let mut e = Engine::builder().build().expect("engine");
    e.execute_sql(&quoted).expect("quoted option keys");
    assert!(e
        .explain("v")
        .expect("explain")
        .contains("idle timeout: 30s"));
    let mut e = Engine::builder().build().expect("engine");
    let err = e
        .execute_sql(&pipeline("ts").replace("INTERVAL '2' SECOND", "INTERVAL '0' SECOND"))
        .expect_err("a window of size zero");
    assert!(
        err.to_string()
            .contains("must be a positive whole number of milliseconds"),
        "{err}"
    );
}

/// The type names Flink and PostgreSQL DDL use read as their Arrow types:
/// a timestamp's precision picks its unit, `TIMESTAMP_LTZ` and `… WITH
/// TIME ZONE` are UTC instants, a text length is accepted (not checked);
/// a bare `DECIMAL` or a precision past 9 is refused, saying what to give.
/// A pipeline over `TIMESTAMP(3)` emits what the same one over `TIMESTAMP`
/// does.
#[test]
fn flink_and_postgresql_type_names_are_read() {
    use thund::spec::parse_schema;
    let utc = |u: TimeUnit| DataType::Timestamp(u, Some("+00:00".into()));
    for (ty, want) in [
        ("VARCHAR(255)", DataType::Utf8),
        ("character varying (20)", DataType::Utf8),
        ("CHAR(3)", DataType::Utf8),
        ("STRING", DataType::Utf8),
        ("DOUBLE PRECISION", DataType::Float64),
        ("NUMERIC(10,2)", DataType::Decimal128(10, 2)),
        ("TIMESTAMP(0)", DataType::Timestamp(TimeUnit::Second, None)),
        (
            "TIMESTAMP(3)",
            DataType::Timestamp(TimeUnit::Millisecond, None),
        ),
        (
            "timestamp( 6 )",
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
        (
            "TIMESTAMP(9) WITHOUT TIME ZONE",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
        ),
        (
            "TIMESTAMP WITHOUT TIME ZONE",
            DataType::Timestamp(TimeUnit::Millisecond, None),
        ),
        ("TIMESTAMP_LTZ(3)", utc(TimeUnit::Millisecond)),
        (
            "TIMESTAMP(6) WITH LOCAL TIME ZONE",
            utc(TimeUnit::Microsecond),
        ),
        ("TIMESTAMPTZ", utc(TimeUnit::Millisecond)),
        ("TIMESTAMP WITH TIME ZONE", utc(TimeUnit::Millisecond)),
        // unsigned integers, as MySQL and DuckDB write them
        ("BIGINT UNSIGNED", DataType::UInt64),
        ("ubigint", DataType::UInt64),
        ("int  unsigned", DataType::UInt32),
        ("USMALLINT", DataType::UInt16),
        ("TINYINT UNSIGNED", DataType::UInt8),
    ] {
        let s = parse_schema(&format!("c {ty}")).unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(s.field(0).data_type(), &want, "{ty}");
    }
    for (ty, says) in [
        ("DECIMAL", "needs its precision and scale"),
        ("NUMERIC", "needs its precision and scale"),
        ("TIMESTAMP(10)", "precision is 0 to 9"),
        ("VARCHAR(x)", "unknown type"),
        ("TIMESTAMP(3) AT NOON", "unknown type"),
    ] {
        let e = parse_schema(&format!("c {ty}")).expect_err(ty);
        assert!(e.contains(says), "{ty}: {e}");
    }
    // NULL and NOT NULL after the type, spaced as written
    let pipeline = |ts: &str, auction: &str| {
        format!(
            "CREATE SOURCE bids (auction {auction}, price BIGINT NULL, ts {ts},
                 WATERMARK FOR ts AS ts - INTERVAL '500' MILLISECOND);
             CREATE VIEW v WITH (output = 'append') AS SELECT window_start, auction, SUM(price) AS s
             FROM TUMBLE(bids, ts, INTERVAL '2' SECOND) GROUP BY window_start, auction;"
        )
    };
    let run = |sql: &str| {
        let mut e = Engine::builder().build().expect("engine");
        e.execute_sql(sql)
            .unwrap_or_else(|err| panic!("{err}\n{sql}"));
        let mut r = SplitMix::new(23);
        let mut out = Vec::new();
        for b in 0..6 {
            e.push("bids", bids(&mut r, 1_000_000 + b * 100 * 40, 100))
                .expect("push");
            out.push(canon(&e.trigger().expect("trigger").views[0].output));
        }
        out
    };
    let want = run(&pipeline("TIMESTAMP", "BIGINT"));
    assert!(want.iter().any(|t| !t.is_empty()));
    assert_eq!(run(&pipeline("TIMESTAMP(3)", "BIGINT  NOT   NULL")), want);
    // a COMMENT documents its column
    assert_eq!(
        run(&pipeline(
            "TIMESTAMP(3) COMMENT 'event time'",
            "BIGINT NOT NULL COMMENT 'the lot'"
        )),
        want
    );
}
