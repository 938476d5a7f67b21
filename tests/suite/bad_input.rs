//! Bad input gets a typed error that names the fault, and nothing already
//! accepted is lost: a run with bad pushes in it emits exactly what the same
//! run without them emits.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use common::{batch, canon, schema, Ev};
use thund::{Engine, Error, OutputMode, ViewSpec, WindowSpec};

const SQL: &str = "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k";

fn spec(sql: &str) -> thund::spec::ViewSpecBuilder {
    ViewSpec::builder("v", sql)
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(1)))
}

fn good(i: i64) -> RecordBatch {
    let rows: Vec<Ev> = (0..20)
        .map(|j| Ev {
            t: i * 700 + j * 37,
            k: j % 3,
            g: "x".into(),
            v: Some(j),
            f: 0.5,
        })
        .collect();
    batch(&rows)
}

#[test]
fn bad_pushes_are_refused_and_change_nothing() {
    let mut messages = Vec::new();
    let mut run = |with_bad: bool, view: &ViewSpec| {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(view.clone()).expect("view");
        let mut out = Vec::new();
        for i in 0..6 {
            e.push("t", good(i)).expect("good push");
            if with_bad {
                // a batch missing a column
                let short = good(i).project(&[0, 1, 2, 4, 5]).expect("project");
                let err = e.push("t", short).expect_err("must be refused");
                assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
                messages.push(err.to_string());
                // a column of the wrong type
                let wrong = Arc::new(Schema::new(vec![
                    Field::new("k", DataType::Utf8, false),
                    Field::new("g", DataType::Utf8, false),
                    Field::new("v", DataType::Int64, true),
                    Field::new("f", DataType::Float64, false),
                    Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
                    Field::new("d", DataType::Decimal128(10, 2), true),
                ]));
                let b = good(i);
                let mut cols = b.columns().to_vec();
                cols[0] = Arc::new(StringArray::from(vec!["x"; b.num_rows()]));
                let err = e
                    .push("t", RecordBatch::try_new(wrong, cols).expect("batch"))
                    .expect_err("refused");
                assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
                messages.push(err.to_string());
                // an unknown source
                let err = e.push("nope", good(i)).expect_err("refused");
                assert!(
                    matches!(&err, Error::UnknownSource { source_name, known }
                        if source_name == "nope" && known == "t"),
                    "{err}"
                );
                messages.push(err.to_string());
                // a NULL in a non-nullable column
                let nn = Arc::new(Schema::new(vec![
                    Field::new("k", DataType::Int64, true),
                    Field::new("g", DataType::Utf8, false),
                    Field::new("v", DataType::Int64, true),
                    Field::new("f", DataType::Float64, false),
                    Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
                    Field::new("d", DataType::Decimal128(10, 2), true),
                ]));
                let mut cols = b.columns().to_vec();
                let mut ks: Vec<Option<i64>> = vec![Some(1); b.num_rows()];
                ks[4] = None;
                cols[0] = Arc::new(Int64Array::from(ks));
                let err = e
                    .push("t", RecordBatch::try_new(nn, cols).expect("batch"))
                    .expect_err("refused");
                assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
                messages.push(err.to_string());
            }
            out.extend(e.trigger().expect("trigger").views[0].output.clone());
        }
        out.extend(e.finish().expect("finish").views[0].output.clone());
        canon(&out)
    };
    let view = spec(SQL).output(OutputMode::Update).build().expect("spec");
    let clean = run(false, &view);
    assert!(!clean.is_empty());
    for view in common::spellings(view) {
        assert_eq!(run(true, &view), clean, "{}", view.sql);
    }
    // the four refusals of the first trigger, as a user reads them
    messages.truncate(4);
    insta::assert_snapshot!("push_refusals", messages.join("\n"));
}

#[test]
fn invalid_views_name_their_fault_and_leave_the_engine_usable() {
    let mut e = Engine::builder().build().expect("engine");
    let cases: Vec<(thund::Result<ViewSpec>, &str)> = vec![
        (spec("SELEC k FROM t").build(), "sql"),
        (spec("SELECT k FROM nowhere").build(), "sql"),
        (spec("SELECT nope FROM t").build(), "sql"),
        (
            ViewSpec::builder("v", SQL)
                .source("t", "missing_ts", schema())
                .window(WindowSpec::tumbling(Duration::from_secs(1)))
                .build(),
            "spec",
        ),
        (
            ViewSpec::builder("v", SQL)
                .source("t", "g", schema())
                .window(WindowSpec::tumbling(Duration::from_secs(1)))
                .build(),
            "spec",
        ),
        (
            spec(SQL)
                .window(WindowSpec::tumbling(Duration::ZERO))
                .build(),
            "spec",
        ),
        (
            spec(SQL)
                .window(WindowSpec::hopping(
                    Duration::from_secs(1),
                    Duration::from_secs(2),
                ))
                .build(),
            "spec",
        ),
        (spec("CREATE TABLE x (a INT)").build(), "sql"),
        // a literal that no row can make castable: refused when the view
        // is made, not at its first trigger with rows
        (
            spec("SELECT k, COUNT(*) AS c FROM t WHERE k <> 'a;b' GROUP BY k").build(),
            "sql",
        ),
    ];
    let mut messages = Vec::new();
    for (s, phase) in cases {
        let err = match s {
            Err(e) => e,
            Ok(s) => {
                // with the window in the SQL, refused in the same phase
                if let Some(in_sql) = common::in_sql(&s) {
                    let err = e.create_view(in_sql).expect_err("refused in SQL too");
                    let got = matches!(&err, Error::Sql { .. } | Error::Spec { .. });
                    assert!(got, "{err}");
                    assert_eq!(matches!(err, Error::Sql { .. }), phase == "sql", "{err}");
                }
                e.create_view(s).expect_err("must be refused")
            }
        };
        let got = match &err {
            Error::Sql { .. } => "sql",
            Error::Spec { .. } => "spec",
            _ => "other",
        };
        assert_eq!(got, phase, "{err}");
        messages.push(err.to_string());
    }
    // what each refusal says, as a user reads it: a change is a reviewed diff
    insta::assert_snapshot!("invalid_views", messages.join("\n---\n"));
    // the engine still takes a good view and runs it
    e.create_view(spec(SQL).build().expect("spec"))
        .expect("good view");
    let err = e
        .create_view(spec(SQL).build().expect("spec"))
        .expect_err("duplicate");
    assert!(matches!(err, Error::DuplicateView(_)));
    e.push("t", good(0)).expect("push");
    assert!(e.finish().expect("finish").views[0].output_rows() > 0);
}

#[test]
fn null_event_times_are_refused_row_by_row_and_kept() {
    let view = spec("SELECT COUNT(*) AS c FROM t").build().expect("spec");
    for view in common::spellings(view) {
        null_event_times_kept(view);
    }
}

fn null_event_times_kept(view: ViewSpec) {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(view).expect("view");
    let b = good(0);
    let mut cols = b.columns().to_vec();
    let mut t: Vec<Option<i64>> = (0..b.num_rows() as i64).map(|i| Some(i * 10)).collect();
    t[3] = None;
    t[7] = None;
    cols[4] = Arc::new(TimestampMillisecondArray::from(t));
    e.push("t", RecordBatch::try_new(schema(), cols).expect("batch"))
        .expect("push");
    let r = e.finish().expect("finish");
    assert_eq!(r.views[0].invalid_rows, 2);
    assert_eq!(r.views[0].late_rows_dropped, 0);
    assert_eq!(
        canon(&r.views[0].output),
        vec![format!("{}|{}|18", common::ts(0), common::ts(1000))]
    );
    let late = e.late_rows("v").expect("late");
    assert_eq!(late.num_rows(), 2);
    let reasons = late
        .column_by_name("reason")
        .expect("reason")
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("s")
        .clone();
    assert!(reasons.iter().all(|r| r == Some("null event time")));
}

#[test]
fn after_finish_input_is_refused() {
    for view in common::spellings(spec(SQL).build().expect("spec")) {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(view).expect("view");
        e.finish().expect("finish");
        assert!(matches!(e.push("t", good(0)), Err(Error::Finished)));
        assert!(matches!(e.trigger(), Err(Error::Finished)));
    }
}

/// Bounds of a `TIMESTAMP(0)` event time are whole seconds, as a date's are
/// whole days: a window that is not (its size, slide, offset or session gap)
/// would print distinct windows with the same bounds, and a `window_time`
/// that is not the window's last instant. Refused in both spellings; whole
/// seconds are fine.
#[test]
fn a_seconds_event_time_with_a_sub_second_window_is_refused_at_create_view() {
    use arrow::datatypes::TimeUnit;
    let s = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("at", DataType::Timestamp(TimeUnit::Second, None), true),
    ]));
    let view = |w: WindowSpec| {
        ViewSpec::builder("v", "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
            .source("t", "at", s.clone())
            .window(w)
            .build()
            .expect("spec")
    };
    let ms = Duration::from_millis;
    for (w, field) in [
        (WindowSpec::tumbling(ms(1_500)), "size"),
        (WindowSpec::hopping(ms(2_000), ms(500)), "slide"),
        (
            WindowSpec::tumbling(ms(2_000)).with_offset(ms(250)),
            "offset",
        ),
        (WindowSpec::session(ms(500), &["k"]), "gap"),
    ] {
        // (in SQL where the window has a spelling there: an offset has not)
        let mut spellings = vec![view(w.clone())];
        spellings.extend(common::in_sql(&view(w.clone())));
        assert!(spellings.len() == 2 || field == "offset", "{w:?} in SQL");
        for spelled in spellings {
            let err = Engine::builder()
                .build()
                .expect("engine")
                .create_view(spelled)
                .expect_err("a sub-second window over seconds");
            assert!(matches!(err, Error::Spec { .. }), "{err}");
            let msg = err.to_string();
            assert!(
                msg.contains(field) && msg.contains("whole number of seconds"),
                "{w:?}: {msg}"
            );
        }
    }
    // whole seconds are fine, in either spelling
    for spelled in [
        view(WindowSpec::tumbling(ms(2_000))),
        common::in_sql(&view(WindowSpec::session(ms(3_000), &["k"]))).expect("in SQL"),
    ] {
        Engine::builder()
            .build()
            .expect("engine")
            .create_view(spelled)
            .expect("whole seconds over seconds");
    }
}

#[test]
fn a_date_event_time_with_a_sub_day_window_is_refused_at_create_view() {
    let s = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("day", DataType::Date32, true),
    ]));
    let view = |w: WindowSpec| {
        ViewSpec::builder("v", "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
            .source("t", "day", s.clone())
            .window(w)
            .build()
            .expect("spec")
    };
    let mut e = Engine::builder().build().expect("engine");
    let err = e
        .create_view(view(WindowSpec::hopping(
            Duration::from_secs(2 * 86_400),
            Duration::from_secs(3_600),
        )))
        .expect_err("a 1 h slide over dates");
    assert!(matches!(err, Error::Spec { .. }), "{err}");
    insta::assert_snapshot!("date_sub_day_window", err.to_string());
    let hop = view(WindowSpec::hopping(
        Duration::from_secs(2 * 86_400),
        Duration::from_secs(3_600),
    ));
    let err = e
        .create_view(common::in_sql(&hop).expect("in SQL"))
        .expect_err("a 1 h slide over dates, in SQL");
    assert!(matches!(err, Error::Spec { .. }), "{err}");
    // whole days are fine, in either spelling
    let day = view(WindowSpec::tumbling(Duration::from_secs(86_400)));
    let mut in_sql = common::in_sql(&day).expect("in SQL");
    in_sql.name = "v_sql".into();
    e.create_view(day).expect("a one-day window over dates");
    e.create_view(in_sql)
        .expect("a one-day window over dates, in SQL");
}
