//! Shared helpers for the integration tests: random event streams, an
//! independent batch oracle, and canonical row sets.
#![allow(dead_code, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, Decimal128Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

pub mod bin;
pub mod db;
pub mod nexmark;
pub mod rng;
#[allow(unused_imports)]
pub use rng::SplitMix;

/// One event of the test streams.
#[derive(Clone, Debug, PartialEq)]
pub struct Ev {
    pub t: i64,
    pub k: i64,
    pub g: String,
    pub v: Option<i64>,
    pub f: f64,
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("g", DataType::Utf8, false),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("d", DataType::Decimal128(10, 2), true),
    ]))
}

pub fn batch(rows: &[Ev]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.k))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.g.as_str()),
            )),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.v))),
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.f))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.t),
            )),
            // d = v / 4 as DECIMAL(10,2): exact quarters
            Arc::new(
                Decimal128Array::from_iter(rows.iter().map(|r| r.v.map(|v| v as i128 * 25)))
                    .with_precision_and_scale(10, 2)
                    .expect("decimal"),
            ),
        ],
    )
    .expect("test batch")
}

/// Canonical text of every row of `batches`, sorted: floats rounded to 9
/// significant digits so summation order does not matter.
/// What `view` emits when `rows` are pushed into `source`, at one trigger
/// and at the end of the stream.
pub fn emitted(
    e: &mut thund::Engine,
    source: &str,
    rows: RecordBatch,
    view: &str,
) -> Vec<RecordBatch> {
    e.push(source, rows).expect("push");
    let mut out = e
        .trigger()
        .expect("trigger")
        .view(view)
        .expect("view")
        .output
        .clone();
    out.extend(
        e.finish()
            .expect("finish")
            .view(view)
            .expect("view")
            .output
            .clone(),
    );
    out
}

pub fn canon(batches: &[RecordBatch]) -> Vec<String> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let cols: Vec<_> = b
            .columns()
            .iter()
            .map(|c| {
                (
                    c.clone(),
                    ArrayFormatter::try_new(c.as_ref(), &opts).expect("formatter"),
                )
            })
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = cols
                .iter()
                .map(|(c, f)| match c.data_type() {
                    DataType::Float64 | DataType::Float32 if c.is_valid(r) => {
                        let v =
                            arrow::compute::cast(&c.slice(r, 1), &DataType::Float64).expect("cast");
                        let v = v
                            .as_any()
                            .downcast_ref::<Float64Array>()
                            .expect("f64")
                            .value(0);
                        format!("{v:.9e}")
                    }
                    _ => f.value(r).to_string(),
                })
                .collect();
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}

/// Window parameters as the test understands them (its own arithmetic).
#[derive(Clone, Copy, Debug)]
pub struct Win {
    pub size: i64,
    pub slide: i64,
}

impl Win {
    /// All windows `[s, s+size)` with `s` a multiple of `slide` that hold `t`.
    pub fn of(&self, t: i64) -> Vec<(i64, i64)> {
        let mut v = Vec::new();
        let mut s = t.div_euclid(self.slide) * self.slide;
        while s + self.size > t {
            v.push((s, s + self.size));
            s -= self.slide;
        }
        v.reverse();
        v
    }
}

/// Each window `[start, end)` with its rows, per source.
pub type Windows<R> = BTreeMap<(i64, i64), Vec<Vec<R>>>;

/// Triggers of rows, a lateness and a window: what the stream strategies draw.
pub type Stream<R> = (Vec<Vec<R>>, i64, Win);

/// Which rows each window holds under the late rule (design §1), simulated
/// from scratch: W per trigger is the minimum over sources of max − lateness
/// (a source with no rows holds W at −∞); a row goes into every window of it
/// still open at its trigger, and a row with no open window is late.
/// Returns the windows (rows per source) and the late count.
pub fn assign<R: Clone>(
    triggers: &[Vec<(usize, R)>],
    sources: usize,
    lateness: i64,
    win: Win,
    time: impl Fn(&R) -> i64,
) -> (Windows<R>, u64) {
    let mut late = 0u64;
    let mut wm: Option<i64> = None;
    let mut max: Vec<Option<i64>> = vec![None; sources];
    let mut windows: Windows<R> = BTreeMap::new();
    for trig in triggers {
        let w_prev = wm;
        for (s, e) in trig {
            let t = time(e);
            max[*s] = Some(max[*s].map_or(t, |m| m.max(t)));
            let open: Vec<(i64, i64)> = win
                .of(t)
                .into_iter()
                .filter(|w| w_prev.is_none_or(|wp| w.1 > wp))
                .collect();
            if open.is_empty() {
                late += 1;
            }
            for w in open {
                windows
                    .entry(w)
                    .or_insert_with(|| vec![Vec::new(); sources])[*s]
                    .push(e.clone());
            }
        }
        if max.iter().all(|m| m.is_some()) {
            let cand = max
                .iter()
                .flatten()
                .map(|m| m - lateness)
                .min()
                .expect("some");
            wm = Some(wm.map_or(cand, |w| w.max(cand)));
        }
    }
    (windows, late)
}

/// The batch oracle (design §1), computed from scratch: [`assign`] the rows
/// to windows, then run the SQL per window in a fresh DataFusion context.
/// Each output row is prefixed by the window bounds.
pub fn oracle(
    triggers: &[Vec<(usize, Ev)>],
    sources: &[&str],
    lateness: i64,
    win: Win,
    sql: &str,
) -> (Vec<String>, u64) {
    let (windows, late) = assign(triggers, sources.len(), lateness, win, |e: &Ev| e.t);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let mut out = Vec::new();
    for ((s, e), rows) in windows {
        let ctx = SessionContext::new();
        for (i, name) in sources.iter().enumerate() {
            let t = MemTable::try_new(schema(), vec![vec![batch(&rows[i])]]).expect("memtable");
            ctx.register_table(*name, Arc::new(t)).expect("register");
        }
        let res = rt
            .block_on(async { ctx.sql(sql).await?.collect().await })
            .expect("oracle sql");
        for line in canon(&res) {
            out.push(format!("{}|{}|{line}", ts(s), ts(e)));
        }
    }
    out.sort();
    (out, late)
}

/// How the engine formats a Timestamp(ms) bound in `canon`.
pub fn ts(ms: i64) -> String {
    let a = TimestampMillisecondArray::from(vec![ms]);
    let f = ArrayFormatter::try_new(&a, &FormatOptions::default()).expect("fmt");
    f.value(0).to_string()
}

/// Number of proptest cases: small by default (CI), more with THUND_PROPTEST_CASES.
pub fn cases(default: u32) -> u32 {
    std::env::var("THUND_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What a run emitted, as the mode's final answer: Append — every row;
/// Update — the rows flagged `final` (without the flag); Complete — the last
/// trigger's output. Canonical and sorted.
pub fn answer(mode: thund::OutputMode, outs: &[Vec<RecordBatch>]) -> Vec<String> {
    match mode {
        thund::OutputMode::Append => canon(&outs.concat()),
        thund::OutputMode::Complete => canon(outs.last().map(|v| v.as_slice()).unwrap_or(&[])),
        thund::OutputMode::Update => {
            let mut fin = Vec::new();
            for b in outs.iter().flatten() {
                let flag = b
                    .column(b.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<arrow::array::BooleanArray>()
                    .expect("final flag")
                    .clone();
                let kept = arrow::compute::filter_record_batch(b, &flag).expect("filter");
                fin.push(
                    kept.project(&(0..b.num_columns() - 1).collect::<Vec<_>>())
                        .expect("project"),
                );
            }
            canon(&fin)
        }
    }
}

/// Windows the randomized laws draw from: (size, slide) in ms.
pub const WINDOWS: &[(i64, i64)] = &[
    (1000, 1000),
    (2500, 2500),
    (3000, 1000),
    (2000, 500),
    (1500, 1000),
];

/// The law streams' strings: short ones, and the edges of string order —
/// empty, a prefix of another, a NUL byte, non-ASCII, longer than a packed key.
pub const GROUPS: [&str; 8] = [
    "a",
    "b",
    "c",
    "",
    "ab",
    "a\u{0}",
    "é",
    "a-string-longer-than-sixteen-bytes",
];

/// A random disordered stream split into random triggers, with a lateness
/// and a window. Times and lateness sit on a 100 ms grid, so window ends and
/// W meet often (the late rule's boundary).
pub fn stream() -> impl proptest::strategy::Strategy<Value = Stream<Ev>> {
    use proptest::prelude::*;
    let payload = (
        0i64..4,
        0usize..GROUPS.len(),
        prop::option::weighted(0.8, -50i64..50),
        -800i64..800,
    );
    stream_of(payload, 0..120).prop_map(|(triggers, lateness, win)| {
        let triggers = triggers
            .into_iter()
            .map(|trig| {
                trig.into_iter()
                    .map(|(t, (k, g, v, f))| Ev {
                        t,
                        k,
                        g: GROUPS[g].to_string(),
                        v,
                        f: f as f64 / 8.0,
                    })
                    .collect()
            })
            .collect();
        (triggers, lateness, win)
    })
}

/// [`stream`]'s times, triggers, lateness and window around any row payload:
/// each row is `(event time, payload)`.
pub fn stream_of<P: proptest::strategy::Strategy>(
    payload: P,
    rows: std::ops::Range<usize>,
) -> impl proptest::strategy::Strategy<Value = Stream<(i64, P::Value)>>
where
    P::Value: Clone,
{
    use proptest::prelude::*;
    let row = (payload, 0i64..250, prop_oneof![0i64..500, 0i64..5000]);
    (
        prop::collection::vec(row, rows),
        prop::collection::vec(1usize..40, 1..12),
        prop_oneof![Just(0i64), (0i64..4).prop_map(|l| l * 500)],
        0..WINDOWS.len(),
    )
        .prop_map(|(rows, cuts, lateness, w)| {
            let mut t = 1_000_000i64;
            let evs: Vec<(i64, P::Value)> = rows
                .into_iter()
                .map(|(p, step, jitter)| {
                    t += step / 100 * 100;
                    (t - jitter / 100 * 100, p)
                })
                .collect();
            let mut triggers = Vec::new();
            let mut rest = &evs[..];
            for c in cuts {
                let n = c.min(rest.len());
                triggers.push(rest[..n].to_vec());
                rest = &rest[n..];
            }
            if !rest.is_empty() {
                triggers.push(rest.to_vec());
            }
            let (size, slide) = WINDOWS[w];
            (triggers, lateness, Win { size, slide })
        })
}

/// The hopping window `win` over source `t`, as a window call in SQL.
pub fn hop_call(win: Win) -> String {
    hop_call_over("t", win)
}

/// The hopping window `win` over `source`, as a window call in SQL.
pub fn hop_call_over(source: &str, win: Win) -> String {
    format!(
        "HOP({source}, ts, INTERVAL '{}' MILLISECOND, INTERVAL '{}' MILLISECOND)",
        win.slide, win.size
    )
}

/// `sql` (a per-window query over source `t`), written with its window in
/// SQL: every `FROM t` reads `call` (`HOP(t, ts, …)` and the like), the top
/// select list shows the bounds first (as the spec's rows carry them) and
/// the top `GROUP BY` groups by them too.
pub fn window_in_sql(sql: &str, call: &str) -> String {
    window_in_sql_over(sql, "t", call)
}

/// [`window_in_sql`] over a source named `source`.
pub fn window_in_sql_over(sql: &str, source: &str, call: &str) -> String {
    let from = format!("FROM {source}");
    let (from_sp, from_paren) = (format!("{from} "), format!("{from})"));
    let mut out = String::new();
    let mut depth = 0i32;
    let mut rest = sql;
    let mut selected = false;
    while !rest.is_empty() {
        let top = depth == 0;
        if let Some(r) = rest
            .strip_prefix(from_sp.as_str())
            .or_else(|| (rest == from).then_some(""))
        {
            out.push_str(&format!("FROM {call} "));
            rest = r;
            continue;
        }
        if let Some(r) = rest.strip_prefix(from_paren.as_str()) {
            out.push_str(&format!("FROM {call})"));
            rest = r;
            continue;
        }
        if top && !selected {
            let head = ["SELECT DISTINCT ", "SELECT "]
                .into_iter()
                .find(|h| rest.starts_with(h));
            if let Some(h) = head {
                out.push_str(h);
                out.push_str("window_start, window_end, ");
                rest = &rest[h.len()..];
                selected = true;
                continue;
            }
        }
        if top {
            if let Some(r) = rest.strip_prefix("GROUP BY ") {
                out.push_str("GROUP BY window_start, window_end, ");
                rest = r;
                continue;
            }
        }
        let ch = rest.chars().next().expect("non-empty");
        depth += match ch {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    out
}

/// `window` over `source` as a window call in SQL (`TUMBLE`, `HOP`, or
/// `SESSION`, whose key is then the query's GROUP BY); `None` with an offset,
/// which the SQL calls do not take.
pub fn window_call(source: &str, window: &thund::WindowSpec) -> Option<String> {
    use thund::WindowKind;
    if !window.offset.is_zero() {
        return None;
    }
    let ms = |d: std::time::Duration| d.as_millis();
    Some(match &window.kind {
        WindowKind::Tumbling { size } => {
            format!("TUMBLE({source}, ts, INTERVAL '{}' MILLISECOND)", ms(*size))
        }
        WindowKind::Hopping { size, slide } => format!(
            "HOP({source}, ts, INTERVAL '{}' MILLISECOND, INTERVAL '{}' MILLISECOND)",
            ms(*slide),
            ms(*size)
        ),
        WindowKind::Session { gap, .. } => {
            format!("SESSION({source}, ts, INTERVAL '{}' MILLISECOND)", ms(*gap))
        }
    })
}

/// `spec` with its window written in SQL instead of in the spec: the query's
/// `FROM {source}` reads the window call over the first source the query
/// reads (the others only hold W back), and the rows carry the bounds first
/// as the spec's rows do. `None` when there is no window or it has no SQL
/// spelling (an offset).
pub fn in_sql(spec: &thund::ViewSpec) -> Option<thund::ViewSpec> {
    let window = spec.window.as_ref()?;
    let source = spec.sources.iter().find(|s| {
        let from = format!("FROM {}", s.name);
        spec.sql.contains(&format!("{from} "))
            || spec.sql.contains(&format!("{from})"))
            || spec.sql.ends_with(&from)
    })?;
    let call = window_call(&source.name, window)?.replacen(
        &format!("{}, ts,", source.name),
        &format!("{}, {},", source.name, source.event_time),
        1,
    );
    let mut out = spec.clone();
    out.sql = window_in_sql_over(&spec.sql, &source.name, &call);
    out.window = None;
    Some(out)
}

/// `spec` as built, then (where the window has a SQL spelling) the same view
/// with the window written in SQL ([`in_sql`]): a test that loops over both
/// holds for both spellings. Panics when a window without an offset finds
/// no `FROM` to put its call in, so no test silently runs one spelling.
pub fn spellings(spec: thund::ViewSpec) -> Vec<thund::ViewSpec> {
    let sql = in_sql(&spec);
    let spellable = spec.window.as_ref().is_some_and(|w| w.offset.is_zero());
    assert!(
        sql.is_some() || !spellable,
        "no SQL spelling for {}: {}",
        spec.name,
        spec.sql
    );
    std::iter::once(spec).chain(sql).collect()
}

/// Pushes each of `triggers` to source `t` and triggers, then finishes; each
/// report (the finish's last) goes to `each` with its index and the engine.
pub fn run_stream<E>(
    e: &mut thund::Engine,
    triggers: &[Vec<Ev>],
    mut each: impl FnMut(usize, &thund::TriggerReport, &thund::Engine) -> Result<(), E>,
) -> Result<(), E> {
    for (i, trig) in triggers.iter().enumerate() {
        e.push("t", batch(trig)).expect("push");
        let r = e.trigger().expect("trigger");
        each(i, &r, e)?;
    }
    let r = e.finish().expect("finish");
    each(triggers.len(), &r, e)
}

/// A random stream in triggers, run in an output mode on 1 or 2 workers.
#[derive(Clone, Debug)]
pub struct Triggers<T> {
    /// What each trigger pushes.
    pub triggers: Vec<T>,
    pub mode: thund::OutputMode,
    pub workers: usize,
}

/// [`Triggers`] of 1 to 4 triggers drawn from `trigger`, in Append or
/// Update mode.
pub fn triggers<S: proptest::strategy::Strategy>(
    trigger: S,
) -> impl proptest::strategy::Strategy<Value = Triggers<S::Value>> {
    use proptest::prelude::*;
    (
        prop::collection::vec(trigger, 1..5),
        prop::sample::select(vec![thund::OutputMode::Append, thund::OutputMode::Update]),
        1usize..=2,
    )
        .prop_map(|(triggers, mode, workers)| Triggers {
            triggers,
            mode,
            workers,
        })
}

/// `spec` (reading source `t`) run over `c`'s triggers on `c.workers`
/// workers, each trigger's rows made by `batch`: the canonical rows of every
/// trigger and of the end of the stream. The view must take the path its
/// spec's mode asks for (Auto: the incremental one).
pub fn outputs<T>(
    spec: thund::ViewSpec,
    c: &Triggers<T>,
    batch: impl Fn(&T) -> RecordBatch,
) -> thund::Result<Vec<Vec<String>>> {
    let want = match spec.mode {
        thund::ExecMode::Auto => thund::PathKind::Incremental,
        _ => thund::PathKind::Recompute,
    };
    let sql = spec.sql.clone();
    let (path, outs) = outputs_on_any_path(spec, c, batch)?;
    assert_eq!(path, want, "{sql}");
    Ok(outs)
}

/// [`outputs`] on whichever path the view takes, and that path.
pub fn outputs_on_any_path<T>(
    spec: thund::ViewSpec,
    c: &Triggers<T>,
    batch: impl Fn(&T) -> RecordBatch,
) -> thund::Result<(thund::PathKind, Vec<Vec<String>>)> {
    let mut e = thund::Engine::builder().workers(c.workers).build()?;
    e.create_view(spec)?;
    let path = e.plan("v")?.path();
    let mut outs = Vec::new();
    for t in &c.triggers {
        e.push("t", batch(t))?;
        outs.push(canon(&e.trigger()?.views[0].output));
    }
    outs.push(canon(&e.finish()?.views[0].output));
    Ok((path, outs))
}
