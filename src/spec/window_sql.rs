//! Windows declared in the query itself, in the spelling of Flink and
//! RisingWave (window table functions in `FROM`) or of PostgreSQL and
//! Materialize (`date_bin` in `GROUP BY`):
//!
//! ```sql
//! SELECT auction, window_start, window_end, COUNT(*) AS num
//! FROM HOP(bids, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
//! GROUP BY auction, window_start, window_end
//! ```
//!
//! * `TUMBLE(source, time, size [, offset])`, `HOP(source, time, slide, size
//!   [, offset])` and `SESSION(source, time, gap)`, where `time` is the
//!   source's event-time column; a session's key is the query's other
//!   `GROUP BY` columns. An offset may be zero, or negative (Flink's
//!   `INTERVAL '-1' MINUTE`), which shifts the windows back. An interval
//!   is one unit (`INTERVAL '10' SECOND`, `INTERVAL '10 seconds'`) or
//!   day-time fields (`INTERVAL '1:30' MINUTE TO SECOND`, see [`fields`]).
//! * Flink's spelling reads as the plain one ([`flink_arguments`]): `TABLE
//!   source` and `DESCRIPTOR(time)` as arguments, the `TABLE(…)` around a
//!   call, and a session's `TABLE source PARTITION BY cols` (the columns
//!   must be the query's other `GROUP BY` columns). Arguments may be named
//!   as Flink names them (`SIZE => …`), after the plain ones.
//! * `date_bin(INTERVAL …, time [, origin])` in `GROUP BY`: a tumbling
//!   window (offset by the origin's time modulo the size), whose
//!   start the select list may show under any name.
//! * Flink's legacy group windows in `GROUP BY`:
//!   `TUMBLE(time, size)`, `HOP(time, slide, size)`, `SESSION(time, gap)`,
//!   whose bounds the select list shows as `TUMBLE_START(time, size)`,
//!   `HOP_END(…)`, … with the same arguments.
//!
//! A window function also names Flink's `window_time` (and the legacy
//! windows `TUMBLE_ROWTIME(…)`): the window's last millisecond, computed
//! from `window_end` as the output is laid out ([`window_time`]).
//!
//! Within one window, `window_start` and `window_end` are constants, so the
//! query is the per-window query of the contract (`../shared/design.md` §1)
//! once they are taken out: grouping by them, joining or filtering on
//! `a.window_start = b.window_start`, or ordering by them changes nothing
//! within a window, and selecting them (under any alias, in any position)
//! shows the bounds every output row already carries. [`lower`] does that
//! rewrite and says where the query wants the bounds; any other use of a
//! bound (arithmetic, a comparison with something else) is an error that
//! names it.

use std::collections::HashMap;
use std::time::Duration;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DateTimeField, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgOperator, FunctionArguments, GroupByExpr, Ident, JoinConstraint, JoinOperator,
    ObjectName, ObjectNamePart, Query, Select, SelectItem, SetExpr, Spanned, Statement,
    TableFactor, Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer};

use crate::error::{Error, Result};
use crate::spec::{
    windows_per_row, OutputMode, ViewSpec, WindowKind, WindowSpec, MAX_WINDOWS_PER_ROW,
};

/// A window bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    Start,
    End,
    /// Flink's `window_time`: the window's last millisecond (its end less
    /// 1 ms), in the bounds' type.
    Time,
}

/// The index [`Layout::project`] gives a shown `window_time`: not a column
/// of the runtime's rows, but their `window_end` less 1 ms (see
/// [`window_time`]).
pub(crate) const WINDOW_TIME: usize = usize::MAX;

/// The `window_time` of rows whose `window_end` column is `end`: each end
/// less 1 ms, in `end`'s type (for a type coarser than milliseconds, the
/// last instant it holds before the end).
pub(crate) fn window_time(end: &arrow::array::ArrayRef) -> Result<arrow::array::ArrayRef> {
    let ms = crate::time::to_millis(end.as_ref())?;
    let last: Vec<i64> = ms.values().iter().map(|e| e.saturating_sub(1)).collect();
    Ok(crate::time::bound_array(&last, end.data_type()))
}

/// Where an output column comes from, in the query's order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    /// A window bound, under this name.
    Bound(Bound, String),
    /// The next column of the per-window query.
    Query,
    /// All remaining columns of the per-window query (`*`).
    Rest,
}

/// How a view whose window is declared in SQL lays out its output: the
/// columns of the runtime's rows (`window_start, window_end, query…,
/// [final]`) it shows, in the query's order and names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    slots: Vec<Slot>,
    /// The first window function in `FROM` (`TUMBLE(…)` with its line and
    /// column), which names the bounds `window_start` and `window_end`.
    call: Option<String>,
    /// The call that declares the window (`TUMBLE(…)` or `date_bin(…)`),
    /// as written and where.
    declared: String,
}

impl Layout {
    /// The window function that names the bounds `window_start` and
    /// `window_end`, as written and where (none for `date_bin`).
    pub(crate) fn call(&self) -> Option<&str> {
        self.call.as_deref()
    }

    /// The call that declares the view's window, as written and where.
    pub(crate) fn declared(&self) -> &str {
        &self.declared
    }

    /// The output columns as indices into `runtime` (window bounds first,
    /// then `query` columns, then `final` in Update mode), with the schema
    /// they make.
    pub(crate) fn project(&self, runtime: &Schema, mode: OutputMode) -> (Vec<usize>, SchemaRef) {
        let flag = usize::from(mode == OutputMode::Update);
        let n_query = runtime.fields().len().saturating_sub(2 + flag);
        let mut next = 0usize;
        let mut idx = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        for s in &self.slots {
            match s {
                Slot::Bound(b, name) => {
                    let (i, of) = match b {
                        Bound::Start => (0, 0),
                        Bound::End => (1, 1),
                        Bound::Time => (WINDOW_TIME, 1),
                    };
                    idx.push(i);
                    fields.push(runtime.field(of).clone().with_name(name));
                }
                Slot::Query | Slot::Rest => {
                    while next < n_query {
                        idx.push(2 + next);
                        fields.push(runtime.field(2 + next).clone());
                        next += 1;
                        if *s == Slot::Query {
                            break;
                        }
                    }
                }
            }
        }
        if flag == 1 {
            let i = runtime.fields().len() - 1;
            idx.push(i);
            fields.push(runtime.field(i).clone());
        }
        (idx, std::sync::Arc::new(Schema::new(fields)))
    }
}

/// A view's spec with its window taken from the SQL: the per-window query,
/// the window, and where the output shows the bounds.
pub(crate) struct Lowered {
    pub spec: ViewSpec,
    pub layout: Layout,
    /// The query as written.
    pub written: String,
}

/// One window declared in the query, and where.
#[derive(Clone, Debug)]
struct Declared {
    /// `TUMBLE(…)` etc. as written, with its line and column.
    text: String,
    at: String,
    source: Option<String>,
    time: String,
    kind: WindowKind,
    /// Flink's optional last argument of `TUMBLE` and `HOP`: the windows
    /// shifted from the Unix epoch's grid by this much.
    offset: Duration,
    /// Flink's `SESSION(TABLE source PARTITION BY …, …)`: the columns, which
    /// must be the query's other `GROUP BY` columns.
    partition: Option<Vec<String>>,
}

/// Whether two declared windows of one kind start at the same times: an
/// offset shifts tumbling windows modulo their size and hopping ones modulo
/// their slide (as `TimeWindows` reads it), so `INTERVAL '2300' MILLISECOND`
/// and `'300'` over windows every second are one window.
fn same_grid(a: &Declared, b: &Declared) -> bool {
    let every = match &a.kind {
        WindowKind::Tumbling { size } => size.as_millis(),
        WindowKind::Hopping { slide, .. } => slide.as_millis(),
        WindowKind::Session { .. } => 0,
    };
    match every {
        0 => a.offset == b.offset,
        n => a.offset.as_millis() % n == b.offset.as_millis() % n,
    }
}

/// The window functions, upper-case.
const FUNCTIONS: [&str; 3] = ["TUMBLE", "HOP", "SESSION"];

/// Flink's window functions Þund does not have: read as calls (Flink's
/// spelling included), and refused naming them.
const UNSUPPORTED: [&str; 1] = ["CUMULATE"];

/// If `spec`'s SQL declares its window (see the module), the spec of the
/// per-window query, with that window; `None` if it declares none.
pub(crate) fn lower(spec: &ViewSpec) -> Result<Option<Lowered>> {
    let view = spec.name.as_str();
    let upper = spec.sql.to_ascii_uppercase();
    if !FUNCTIONS
        .iter()
        .chain(&UNSUPPORTED)
        .any(|f| upper.contains(f))
        && !upper.contains("DATE_BIN")
    {
        return Ok(None);
    }
    let flink = flink_arguments(&spec.sql);
    // SQL this parser does not take declares no window here; planning
    // reports what is wrong with it, in DataFusion's words
    let text = flink.as_ref().map_or(spec.sql.as_str(), |f| f.sql.as_str());
    let Ok(mut stmts) = Parser::parse_sql(&GenericDialect {}, text) else {
        return Ok(None);
    };
    let [Statement::Query(q)] = stmts.as_mut_slice() else {
        // one query is what a view is; planning reports anything else
        return Ok(None);
    };
    let mut r = Rewriter {
        view,
        names: HashMap::new(),
        declared: Vec::new(),
        hidden: None,
        hidden_in_with: None,
        partitions: flink.map(|f| f.partitions).unwrap_or_default(),
    };
    let slots = r.query(q, true)?;
    let Some(first) = r.declared.first().cloned() else {
        return Ok(None);
    };
    if let Some(other) = r
        .declared
        .iter()
        .find(|d| d.kind != first.kind || d.time != first.time || !same_grid(d, &first))
    {
        return Err(Error::spec(
            view,
            format!(
                "the query declares two different windows: `{}` ({}) and `{}` ({}); \
                 a view has one window",
                first.text, first.at, other.text, other.at
            ),
        ));
    }
    if spec.window.is_some() {
        return Err(Error::spec(
            view,
            format!(
                "the window is declared twice: in the SQL (`{}`, {}) and in the spec's \
                 [window]; remove one of them",
                first.text, first.at
            ),
        ));
    }
    for d in &r.declared {
        check_time(spec, d)?;
    }
    let mut out = spec.clone();
    out.sql = q.to_string();
    out.window = Some(WindowSpec {
        kind: first.kind,
        offset: first.offset,
    });
    Ok(Some(Lowered {
        spec: out,
        layout: Layout {
            slots,
            call: r
                .declared
                .iter()
                .find(|d| d.source.is_some())
                .map(|d| format!("`{}` ({})", d.text, d.at)),
            declared: format!("`{}` ({})", first.text, first.at),
        },
        written: spec.sql.clone(),
    }))
}

/// The offset from the epoch's grid of `date_bin`'s bins of `size` that
/// start at `origin` (`TIMESTAMP '2001-01-01'`, or a quoted time alone), as
/// PostgreSQL and Materialize align them: the origin's time modulo the size.
/// What is wrong with `origin` otherwise.
fn origin_offset(origin: &Expr, size: Duration) -> std::result::Result<Duration, String> {
    let text = match origin {
        Expr::TypedString(t) => {
            let ty = t.data_type.to_string().to_ascii_uppercase();
            match ty.starts_with("TIMESTAMP") || ty.starts_with("DATETIME") || ty == "DATE" {
                true => t.value.value.clone().into_string(),
                false => None,
            }
        }
        Expr::Value(v) => v.value.clone().into_string(),
        _ => None,
    }
    .ok_or_else(|| format!("`{origin}` is not a literal timestamp"))?;
    let nanos = arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(&text)
        .map_err(|e| format!("`{origin}` is not a timestamp ({e})"))?;
    if nanos % 1_000_000 != 0 {
        return Err(format!(
            "`{origin}` is not a whole millisecond (event times are whole milliseconds)"
        ));
    }
    // (`size` is an interval already checked: positive, at most `MAX_MS`)
    Ok(Duration::from_millis(
        (nanos / 1_000_000).rem_euclid(super::ms(size).max(1)) as u64,
    ))
}

/// A query's text with Flink's spelling of its window calls read as the
/// plain one (see [`flink_arguments`]).
#[derive(Debug)]
pub(crate) struct FlinkSpelling {
    pub(crate) sql: String,
    /// Each `SESSION` call's `PARTITION BY` columns, by the line and column
    /// of the function's name.
    partitions: HashMap<(u64, u64), Vec<String>>,
}

/// `sql` with Flink's spelling of window calls read as the plain one:
///
/// * `TABLE bids` and `DESCRIPTOR(ts)` as arguments read as `bids` and `ts`;
/// * the `TABLE(…)` Flink wraps a call in, `FROM TABLE(TUMBLE(…))`, reads as
///   the call alone;
/// * a session's `TABLE bids PARTITION BY bidder` (or `PARTITION BY (a,
///   b)`) reads as `bids`, its columns kept in [`FlinkSpelling`] for the
///   lowering to check against the query's `GROUP BY`.
///
/// The words, the parentheses and the partition's columns are blanked out,
/// so every other token keeps its line and column (and errors point where
/// the user wrote). Named arguments (`SIZE => …`) are left to the parser,
/// which reads them. `None` if no call is spelled so.
pub(crate) fn flink_arguments(sql: &str) -> Option<FlinkSpelling> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let sig: Vec<&TokenWithSpan> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let token = |i: usize| sig.get(i).map(|t| &t.token);
    let word = |i: usize, w: &str| matches!(token(i), Some(Token::Word(x)) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let name = |i: usize| matches!(token(i), Some(Token::Word(_)));
    let name_at = |i: usize| match token(i) {
        Some(Token::Word(w)) => w.value.clone(),
        _ => String::new(),
    };
    // `PARTITION BY col` or `PARTITION BY (a, b)` from token `k`: the
    // columns, and the token past them (anything else is left for the parser
    // to refuse)
    let partition_by = |mut k: usize| -> Option<(Vec<String>, usize)> {
        if !(word(k, "PARTITION") && word(k + 1, "BY")) {
            return None;
        }
        k += 2;
        if token(k) != Some(&Token::LParen) {
            return name(k).then(|| (vec![name_at(k)], k + 1));
        }
        let mut cols = Vec::new();
        k += 1;
        while name(k) && token(k + 1) == Some(&Token::Comma) {
            cols.push(name_at(k));
            k += 2;
        }
        (name(k) && token(k + 1) == Some(&Token::RParen)).then(|| {
            cols.push(name_at(k));
            (cols, k + 2)
        })
    };
    let mut blank: Vec<Span> = Vec::new();
    let mut partitions = HashMap::new();
    let mut i = 0;
    while i < sig.len() {
        if !(FUNCTIONS.iter().chain(&UNSUPPORTED).any(|f| word(i, f))
            && token(i + 1) == Some(&Token::LParen))
        {
            i += 1;
            continue;
        }
        let at = (sig[i].span.start.line, sig[i].span.start.column);
        // the call's arguments, each from its first token (after its name,
        // if named), up to the parenthesis that closes the call
        let (mut j, mut depth, mut first) = (i + 2, 1usize, true);
        while j < sig.len() {
            if first {
                first = false;
                let mut k = j;
                if name(k) && token(k + 1) == Some(&Token::RArrow) {
                    k += 2;
                }
                if word(k, "TABLE") && name(k + 1) {
                    blank.push(sig[k].span);
                    k += 2;
                    if let Some((cols, past)) = partition_by(k) {
                        blank.extend(sig[k..past].iter().map(|t| t.span));
                        partitions.insert(at, cols);
                        j = past;
                        continue;
                    }
                }
                if word(k, "DESCRIPTOR")
                    && token(k + 1) == Some(&Token::LParen)
                    && name(k + 2)
                    && token(k + 3) == Some(&Token::RParen)
                {
                    blank.extend([sig[k].span, sig[k + 1].span, sig[k + 3].span]);
                }
            }
            match token(j) {
                Some(Token::LParen) => depth += 1,
                Some(Token::RParen) => depth -= 1,
                Some(Token::Comma) if depth == 1 => first = true,
                _ => {}
            }
            j += 1;
            if depth == 0 {
                break;
            }
        }
        // `TABLE(` before the call and `)` right after it
        if i >= 2
            && word(i - 2, "TABLE")
            && token(i - 1) == Some(&Token::LParen)
            && depth == 0
            && token(j) == Some(&Token::RParen)
        {
            blank.extend([sig[i - 2].span, sig[i - 1].span, sig[j].span]);
        }
        i += 2;
    }
    if blank.is_empty() {
        return None;
    }
    // (sqlparser counts columns in characters: one space a character keeps
    // them; the spans in order, so each character is checked against one)
    let mut spans: Vec<((u64, u64), (u64, u64))> = blank
        .iter()
        .map(|s| ((s.start.line, s.start.column), (s.end.line, s.end.column)))
        .collect();
    spans.sort_unstable();
    let mut spans = spans.into_iter().peekable();
    let (mut line, mut column) = (1u64, 1u64);
    let mut out = String::with_capacity(sql.len());
    for ch in sql.chars() {
        let at = (line, column);
        while spans.next_if(|&(_, end)| end <= at).is_some() {}
        let blanked = spans.peek().is_some_and(|&(start, _)| start <= at);
        out.push(if blanked { ' ' } else { ch });
        if ch == '\n' {
            (line, column) = (line + 1, 1);
        } else {
            column += 1;
        }
    }
    Some(FlinkSpelling {
        sql: out,
        partitions,
    })
}

/// The window's time column must be its source's event time.
fn check_time(spec: &ViewSpec, d: &Declared) -> Result<()> {
    let sources: Vec<_> = match &d.source {
        Some(name) => {
            let s = spec
                .sources
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    Error::spec(
                        &spec.name,
                        format!(
                            "`{}` ({}) reads `{name}`, which is not a source of the view \
                             (its sources: {})",
                            d.text,
                            d.at,
                            spec.sources
                                .iter()
                                .map(|s| s.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            vec![s]
        }
        None => spec.sources.iter().collect(),
    };
    for s in sources {
        if !s.event_time.eq_ignore_ascii_case(&d.time) {
            return Err(Error::spec(
                &spec.name,
                format!(
                    "`{}` ({}) windows by `{}`, but source `{}` has event time `{}`: \
                     windows are over event time",
                    d.text, d.at, d.time, s.name, s.event_time
                ),
            ));
        }
    }
    Ok(())
}

struct Rewriter<'a> {
    view: &'a str,
    /// Names (lower-case) that denote a window bound: `window_start`,
    /// `window_end` once a window function is in scope, and the aliases
    /// subqueries give them.
    names: HashMap<String, Bound>,
    declared: Vec<Declared>,
    /// A bound that a subquery in `FROM` selects (as written, and where),
    /// which a `*` over it would not show: the bounds are taken out of
    /// every subquery, as of the query itself.
    hidden: Option<String>,
    /// The same for the subqueries of `WITH`.
    hidden_in_with: Option<String>,
    /// Flink's `PARTITION BY` of each `SESSION` call, by where its name is.
    partitions: HashMap<(u64, u64), Vec<String>>,
}

fn position(e: &impl Spanned) -> String {
    let s = e.span().start;
    format!("line {}, column {}", s.line, s.column)
}

/// `e`'s conjuncts.
fn conjuncts(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts(*left, out);
            conjuncts(*right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner, out)
        }
        other => out.push(other),
    }
}

fn and_all(mut es: Vec<Expr>) -> Option<Expr> {
    let first = if es.is_empty() {
        return None;
    } else {
        es.remove(0)
    };
    Some(es.into_iter().fold(first, |l, r| Expr::BinaryOp {
        left: Box::new(l),
        op: BinaryOperator::And,
        right: Box::new(r),
    }))
}

/// A duration from `INTERVAL '10' SECOND` or `INTERVAL '10 seconds'`.
pub(super) fn interval(view: &str, what: &str, e: &Expr) -> Result<Duration> {
    at_call(view, what, e, interval_value(e))
}

/// [`interval`], zero allowed: an offset of zero shifts nothing.
fn offset(view: &str, what: &str, e: &Expr) -> Result<Duration> {
    at_call(view, what, e, interval_or_zero(e))
}

/// What is wrong with argument `e` of the call `what`, said with its position.
fn at_call(
    view: &str,
    what: &str,
    e: &Expr,
    read: std::result::Result<Duration, String>,
) -> Result<Duration> {
    read.map_err(|m| Error::spec(view, format!("{what} ({}): {m}", position(e))))
}

/// An offset argument: an interval, or a negative one as Flink takes it
/// (`-INTERVAL '1' MINUTE`, `INTERVAL '-1' MINUTE`), or zero: whether it is
/// negative, and its length.
fn signed_interval(view: &str, what: &str, e: &Expr) -> Result<(bool, Duration)> {
    use datafusion::sql::sqlparser::ast::UnaryOperator;
    if let Expr::UnaryOp {
        op: UnaryOperator::Minus,
        expr,
    } = e
    {
        return Ok((true, offset(view, what, expr)?));
    }
    let Some(positive) = minus_in_quotes(e) else {
        return Ok((false, offset(view, what, e)?));
    };
    // (what is wrong with it, said of the interval as written)
    match offset(view, what, &positive) {
        Ok(d) => Ok((true, d)),
        Err(Error::Spec { view, message }) => Err(Error::Spec {
            view,
            message: message.replace(&positive.to_string(), &e.to_string()),
        }),
        Err(other) => Err(other),
    }
}

/// `e`, an `INTERVAL '-…'` whose quoted text starts with a minus, without
/// the minus (`None` for any other expression).
fn minus_in_quotes(e: &Expr) -> Option<Expr> {
    let Expr::Interval(iv) = e else {
        return None;
    };
    let Expr::Value(v) = iv.value.as_ref() else {
        return None;
    };
    let (Value::SingleQuotedString(text) | Value::DoubleQuotedString(text)) = &v.value else {
        return None;
    };
    let rest = text.trim_start().strip_prefix('-')?;
    let mut value = v.clone();
    value.value = Value::SingleQuotedString(rest.to_string());
    let mut positive = iv.clone();
    positive.value = Box::new(Expr::Value(value));
    Some(Expr::Interval(positive))
}

/// [`interval`]'s duration, or what is wrong with `e`.
pub(super) fn interval_value(e: &Expr) -> std::result::Result<Duration, String> {
    match interval_or_zero(e)? {
        d if d.is_zero() => Err(format!(
            "`{e}` must be a positive whole number of milliseconds"
        )),
        d => Ok(d),
    }
}

/// [`interval_value`], zero allowed (a watermark's delay: `ts - INTERVAL '0'
/// SECOND` is `ts`).
pub(super) fn interval_or_zero(e: &Expr) -> std::result::Result<Duration, String> {
    let bad = |m: &str| m.to_string();
    let Expr::Interval(iv) = e else {
        return Err(bad(&format!("`{e}` is not an INTERVAL")));
    };
    let text = match iv.value.as_ref() {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            _ => return Err(bad(&format!("`{e}` is not a literal interval"))),
        },
        _ => return Err(bad(&format!("`{e}` is not a literal interval"))),
    };
    if let (Some(leading), Some(last)) = (&iv.leading_field, &iv.last_field) {
        return whole_ms(e, fields(e, text.trim(), leading, last)?);
    }
    let unit = match &iv.leading_field {
        None => "",
        Some(DateTimeField::Millisecond | DateTimeField::Milliseconds) => "ms",
        Some(DateTimeField::Second | DateTimeField::Seconds) => "s",
        Some(DateTimeField::Minute | DateTimeField::Minutes) => "min",
        Some(DateTimeField::Hour | DateTimeField::Hours) => "h",
        Some(DateTimeField::Day | DateTimeField::Days) => "d",
        Some(DateTimeField::Week(_) | DateTimeField::Weeks) => "w",
        Some(
            DateTimeField::Microsecond
            | DateTimeField::Microseconds
            | DateTimeField::Nanosecond
            | DateTimeField::Nanoseconds,
        ) => {
            return Err(bad(&format!(
                "`{e}`: event times are whole milliseconds, and windows too"
            )))
        }
        Some(other) => {
            return Err(bad(&format!(
                "`{e}`: {other} is not a fixed duration (months and years vary in length)"
            )))
        }
    };
    // with a unit after the quotes, the quotes hold a number alone
    let text = text.trim();
    if !unit.is_empty() && text.contains(|c: char| c.is_alphabetic()) {
        return Err(bad(&format!(
            "`{e}`: with a unit after the quotes, give only a number in them \
             (INTERVAL '10' SECOND, or INTERVAL '10 seconds')"
        )));
    }
    let d = super::duration::parse(&format!("{text}{unit}")).map_err(|b| match b {
        super::duration::Bad::Parse(err) => format!("`{e}` is not a duration ({err})"),
        b => format!("`{e}`: {b}"),
    })?;
    whole_ms(e, d)
}

/// `d`, the duration of interval `e`, if it is a whole number of milliseconds
/// that is not too large.
fn whole_ms(e: &Expr, d: Duration) -> std::result::Result<Duration, String> {
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!("`{e}` must be a whole number of milliseconds"));
    }
    if let Some(m) = super::too_large(d) {
        return Err(format!("`{e}` {m}"));
    }
    Ok(d)
}

/// The duration of a day-time interval given in several fields, as the SQL
/// standard and Flink write it: `INTERVAL '1:30' MINUTE TO SECOND`,
/// `INTERVAL '2 03:04:05.006' DAY TO SECOND`. The first field is a whole
/// number; each later one is in its range (hours below 24, minutes and
/// seconds below 60), after a space following the days and a colon
/// otherwise; the seconds may have a fraction.
fn fields(
    e: &Expr,
    text: &str,
    leading: &DateTimeField,
    last: &DateTimeField,
) -> std::result::Result<Duration, String> {
    use DateTimeField as F;
    let rank = |f: &DateTimeField| match f {
        F::Day | F::Days => Some(0),
        F::Hour | F::Hours => Some(1),
        F::Minute | F::Minutes => Some(2),
        F::Second | F::Seconds => Some(3),
        _ => None,
    };
    let (first, end) = match (rank(leading), rank(last)) {
        (Some(first), Some(end)) if first < end => (first, end),
        (Some(_), Some(_)) => {
            return Err(format!(
                "`{e}`: {leading} TO {last} does not go from a larger field to a smaller one"
            ))
        }
        _ if [leading, last]
            .iter()
            .any(|f| matches!(f, F::Year | F::Years | F::Month | F::Months)) =>
        {
            return Err(format!(
                "`{e}`: {leading} TO {last} is not a fixed duration \
                 (months and years vary in length)"
            ))
        }
        _ => {
            return Err(format!(
                "`{e}`: give the interval in one unit, or in fields from DAY, HOUR, \
                 MINUTE and SECOND ({leading} TO {last} is neither)"
            ))
        }
    };
    const NAMES: [&str; 4] = ["days", "hours", "minutes", "seconds"];
    const MS: [u128; 4] = [86_400_000, 3_600_000, 60_000, 1_000];
    const BELOW: [u128; 4] = [0, 24, 60, 60];
    let layout = ["D", "H", "M", "S"][first..=end]
        .iter()
        .enumerate()
        .map(|(i, f)| match (i, first) {
            (0, _) => f.to_string(),
            (1, 0) => format!(" {f}{f}"),
            _ => format!(":{f}{f}"),
        })
        .collect::<String>();
    let shape = || format!("`{e}`: give {leading} TO {last} as '{layout}'");
    let mut parts: Vec<&str> = Vec::with_capacity(4);
    let mut rest = text;
    if first == 0 {
        let (days, time) = rest.split_once(' ').ok_or_else(shape)?;
        parts.push(days);
        rest = time.trim_start();
    }
    parts.extend(rest.split(':'));
    if parts.len() != end - first + 1 {
        return Err(shape());
    }
    let too_large = || format!("`{e}` is too large");
    let mut ms: u128 = 0;
    for (at, part) in parts.iter().enumerate() {
        let field = first + at;
        let (whole, fraction) = match part.split_once('.') {
            Some((w, f)) if field == 3 => (w, Some(f)),
            Some(_) => return Err(shape()),
            None => (*part, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
            return Err(shape());
        }
        let v: u128 = whole.parse().map_err(|_| too_large())?;
        if at > 0 && v >= BELOW[field] {
            return Err(format!(
                "`{e}`: {v} {} is out of range (at most {})",
                NAMES[field],
                BELOW[field] - 1
            ));
        }
        ms = v
            .checked_mul(MS[field])
            .and_then(|x| ms.checked_add(x))
            .ok_or_else(too_large)?;
        if let Some(f) = fraction {
            // thousandths, then anything finer must be zero
            let (milli, finer) = f.split_at(f.len().min(3));
            if finer.bytes().any(|b| b != b'0') {
                return Err(format!("`{e}` must be a whole number of milliseconds"));
            }
            let milli: u128 = format!("{milli:0<3}").parse().map_err(|_| shape())?;
            ms = ms.checked_add(milli).ok_or_else(too_large)?;
        }
    }
    let ms = u64::try_from(ms).map_err(|_| too_large())?;
    Ok(Duration::from_millis(ms))
}

/// The plain expressions of a function call's arguments.
fn call_args<'f>(view: &str, f: &'f Function, name: &str) -> Result<Vec<&'f Expr>> {
    let FunctionArguments::List(list) = &f.args else {
        return Err(Error::spec(
            view,
            format!(
                "`{f}` ({}): {name} takes its arguments in parentheses",
                position(f)
            ),
        ));
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
            other => Err(Error::spec(
                view,
                format!("`{f}` ({}): `{other}` is not a plain argument", position(f)),
            )),
        })
        .collect()
}

/// Whether `name` is one of `functions` (upper-case), in any case.
fn named(name: &ObjectName, functions: &[&str]) -> bool {
    let name = name.to_string();
    functions.iter().any(|f| name.eq_ignore_ascii_case(f))
}

fn ident_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(i.value.clone()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
        _ => None,
    }
}

fn is_date_bin(e: &Expr) -> Option<&Function> {
    match e {
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("date_bin") => Some(f),
        _ => None,
    }
}

impl Rewriter<'_> {
    fn err(&self, m: String) -> Error {
        Error::spec(self.view, m)
    }

    /// The bound `e` names, if it is one.
    fn bound(&self, e: &Expr) -> Option<Bound> {
        let e = match e {
            Expr::Nested(inner) => inner.as_ref(),
            other => other,
        };
        if let Some(f) = is_date_bin(e) {
            return self.is_declared_bin(f).then_some(Bound::Start);
        }
        if let Expr::Function(f) = e {
            return self.legacy_bound(f);
        }
        ident_of(e).and_then(|n| self.names.get(&n.to_ascii_lowercase()).copied())
    }

    /// Whether the `date_bin` call `f` is a tumbling window the query
    /// declares (its size, over its time column): only then is it that
    /// window's start. Any other is an expression of the row.
    fn is_declared_bin(&self, f: &Function) -> bool {
        let Ok(args) = call_args(self.view, f, "date_bin") else {
            return false;
        };
        let (Some(size), Some(time)) = (
            args.first().and_then(|a| interval_value(a).ok()),
            args.get(1).and_then(|a| ident_of(a)),
        ) else {
            return false;
        };
        let offset = match args.get(2) {
            None => Duration::ZERO,
            Some(origin) => match origin_offset(origin, size) {
                Ok(o) => o,
                Err(_) => return false,
            },
        };
        args.len() <= 3
            && self.declared.iter().any(|d| {
                d.time.eq_ignore_ascii_case(&time)
                    && d.offset == offset
                    && matches!(d.kind, WindowKind::Tumbling { size: s } if s == size)
            })
    }

    /// Bounds are constants within a window: any use but those the module
    /// names is refused.
    fn no_bound_in(&self, e: &Expr, clause: &str) -> Result<()> {
        use datafusion::sql::sqlparser::ast::visit_expressions;
        let mut found: Option<String> = None;
        let _ = visit_expressions(e, |x: &Expr| {
            if found.is_none() && self.bound(x).is_some() {
                found = Some(format!("{x} ({})", position(x)));
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        match found {
            None => Ok(()),
            Some(b) => Err(self.err(format!(
                "`{e}` in {clause} uses the window bound `{b}`: within a window it is a \
                 constant, so select it, group by it, or join, filter or order on \
                 `a.window_start = b.window_start`, but compute nothing with it"
            ))),
        }
    }

    /// `e`'s conjuncts without the equalities of two equal bounds, checked.
    fn strip_equal_bounds(&self, e: Expr, clause: &str) -> Result<Option<Expr>> {
        let mut cs = Vec::new();
        conjuncts(e, &mut cs);
        let mut kept = Vec::new();
        for c in cs {
            if let Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } = &c
            {
                if let (Some(a), Some(b)) = (self.bound(left), self.bound(right)) {
                    if a == b {
                        continue;
                    }
                }
            }
            self.no_bound_in(&c, clause)?;
            kept.push(c);
        }
        Ok(and_all(kept))
    }

    /// The window functions of the subqueries inside `e`.
    fn subqueries(&mut self, e: &mut Expr) -> Result<()> {
        use datafusion::sql::sqlparser::ast::visit_expressions_mut;
        let flow = visit_expressions_mut(e, |x: &mut Expr| {
            let q = match x {
                Expr::Subquery(q) => q,
                Expr::Exists { subquery, .. } => subquery,
                Expr::InSubquery { subquery, .. } => subquery,
                _ => return std::ops::ControlFlow::Continue(()),
            };
            match self.query(q, false) {
                Ok(_) => std::ops::ControlFlow::Continue(()),
                Err(err) => std::ops::ControlFlow::Break(err),
            }
        });
        match flow {
            std::ops::ControlFlow::Break(err) => Err(err),
            std::ops::ControlFlow::Continue(()) => Ok(()),
        }
    }

    fn query(&mut self, q: &mut Query, top: bool) -> Result<Vec<Slot>> {
        if let Some(with) = &mut q.with {
            for cte in &mut with.cte_tables {
                self.query(&mut cte.query, false)?;
                self.hidden_in_with = self.hidden_in_with.take().or(self.hidden.take());
            }
        }
        let slots = self.set_expr(&mut q.body, top)?;
        if let Some(ob) = &mut q.order_by {
            if let datafusion::sql::sqlparser::ast::OrderByKind::Expressions(exprs) = &mut ob.kind {
                let mut kept = Vec::new();
                for o in exprs.drain(..) {
                    if self.bound(&o.expr).is_some() {
                        continue; // one value per window: orders nothing
                    }
                    self.no_bound_in(&o.expr, "ORDER BY")?;
                    kept.push(o);
                }
                *exprs = kept;
                if exprs.is_empty() {
                    q.order_by = None;
                }
            }
        }
        Ok(slots)
    }

    fn set_expr(&mut self, s: &mut SetExpr, top: bool) -> Result<Vec<Slot>> {
        match s {
            SetExpr::Select(sel) => self.select(sel, top),
            SetExpr::Query(q) => self.query(q, top),
            SetExpr::SetOperation { left, right, .. } => {
                let slots = self.set_expr(left, top)?;
                self.set_expr(right, false)?;
                Ok(slots)
            }
            _ => Ok(vec![Slot::Rest]),
        }
    }

    /// A window call's arguments `list` by parameter (`params`, Flink's
    /// names): the plain ones in order, then the named ones (`SIZE => …`,
    /// in any order and any case) where their names say. An argument of
    /// another form, a plain one after a named one, an unknown name or a
    /// parameter given twice is an error that names it.
    fn by_parameter<'e>(
        &self,
        text: &str,
        at: &str,
        list: &[&'e FunctionArg],
        params: &[&str],
        usage: &str,
    ) -> Result<Vec<Option<&'e Expr>>> {
        let mut out: Vec<Option<&Expr>> = vec![None; params.len()];
        let mut named = None;
        for (i, a) in list.iter().enumerate() {
            let (slot, e) = match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => {
                    if let Some(n) = named {
                        return Err(self.err(format!(
                            "`{text}` ({at}): the plain argument `{e}` follows the named \
                             argument `{n}`: name it too, or put it before"
                        )));
                    }
                    (i, e)
                }
                FunctionArg::Named {
                    name,
                    arg: FunctionArgExpr::Expr(e),
                    operator: FunctionArgOperator::RightArrow,
                } => {
                    named = Some(a);
                    let Some(slot) = params
                        .iter()
                        .position(|p| p.eq_ignore_ascii_case(&name.value))
                    else {
                        return Err(self.err(format!(
                            "`{text}` ({at}): no parameter is named `{name}` (its \
                             parameters: {}): {usage}",
                            params.join(", ")
                        )));
                    };
                    (slot, e)
                }
                other => {
                    return Err(self.err(format!(
                        "`{text}` ({at}): `{other}` is not a plain argument or one named \
                         with `=>`"
                    )))
                }
            };
            match out.get_mut(slot) {
                // (too many plain arguments: the caller counts them)
                None => {}
                Some(Some(_)) => {
                    return Err(
                        self.err(format!("`{text}` ({at}): {} is given twice", params[slot]))
                    )
                }
                Some(free) => *free = Some(e),
            }
        }
        Ok(out)
    }

    /// A window function in `FROM`: replaced by its source.
    fn factor(&mut self, t: &mut TableFactor) -> Result<Option<usize>> {
        match t {
            TableFactor::Table { name, args, .. }
                if args.is_some() && named(name, &UNSUPPORTED) =>
            {
                let fname = name.to_string().to_ascii_uppercase();
                let t: &TableFactor = t;
                Err(self.err(format!(
                    "`{t}` ({}): {fname} windows are not supported; the window functions \
                     are TUMBLE, HOP and SESSION",
                    position(t)
                )))
            }
            TableFactor::Table { name, args, .. } if args.is_some() && named(name, &FUNCTIONS) => {
                let fname = name.to_string().to_ascii_uppercase();
                let called_at = (name.span().start.line, name.span().start.column);
                let t_ro: &TableFactor = t;
                let text = format!("{t_ro}");
                let at = position(t_ro);
                let TableFactor::Table { args, alias, .. } = t_ro else {
                    return Ok(None);
                };
                let alias = alias.clone();
                // (the parameters, by Flink's names; from `least` on, optional)
                let (params, least, usage): (&[&str], usize, &str) = match fname.as_str() {
                    "TUMBLE" => (
                        &["DATA", "TIMECOL", "SIZE", "OFFSET"],
                        3,
                        "TUMBLE(source, time_column, INTERVAL size [, INTERVAL offset])",
                    ),
                    "HOP" => (
                        &["DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"],
                        4,
                        "HOP(source, time_column, INTERVAL slide, INTERVAL size [, INTERVAL offset])",
                    ),
                    _ => (
                        &["DATA", "TIMECOL", "GAP"],
                        3,
                        "SESSION(source, time_column, INTERVAL gap)",
                    ),
                };
                let most = params.len();
                let list: Vec<&FunctionArg> = args.iter().flat_map(|a| a.args.iter()).collect();
                let args = self.by_parameter(&text, &at, &list, params, usage)?;
                if args[..least].iter().any(Option::is_none) || list.len() > most {
                    let count = match least == most {
                        true => format!("{most}"),
                        false => format!("{least} or {most}"),
                    };
                    // (with named arguments, which one is missing)
                    let any_named = list.iter().any(|a| matches!(a, FunctionArg::Named { .. }));
                    let missing: Vec<&str> = (0..least)
                        .filter(|&i| any_named && args[i].is_none())
                        .map(|i| params[i])
                        .collect();
                    let missing = match missing.is_empty() {
                        true => String::new(),
                        false => format!(" ({} missing)", missing.join(", ")),
                    };
                    return Err(self.err(format!(
                        "`{text}` ({at}) takes {count} arguments{missing}: {usage}"
                    )));
                }
                let arg = |i: usize| args[i].expect("a required argument, checked above");
                // (the source as written: a quoted name stays quoted in the query)
                let written = match arg(0) {
                    Expr::Identifier(i) => Some(i.clone()),
                    Expr::CompoundIdentifier(parts) => parts.last().cloned(),
                    _ => None,
                };
                let (Some(source), Some(time)) = (ident_of(arg(0)), ident_of(arg(1))) else {
                    return Err(self.err(format!(
                        "`{text}` ({at}): the first two arguments name the source and its \
                         event-time column: {usage}"
                    )));
                };
                let what = format!("`{text}`");
                let offset = match args.get(least).copied().flatten() {
                    Some(e) => Some(signed_interval(self.view, &what, e)?),
                    None => None,
                };
                let kind = match fname.as_str() {
                    "TUMBLE" => WindowKind::Tumbling {
                        size: interval(self.view, &what, arg(2))?,
                    },
                    "HOP" => self.hopping(
                        (&text, &at, usage),
                        interval(self.view, &what, arg(2))?,
                        interval(self.view, &what, arg(3))?,
                        ("third", "fourth"),
                    )?,
                    _ => WindowKind::Session {
                        gap: interval(self.view, &what, arg(2))?,
                        key: Vec::new(),
                    },
                };
                // a negative offset shifts the windows back by it: the same
                // windows as the rest of the grid's step (size or slide) forward
                let offset = match (offset, &kind) {
                    (None, _) => Duration::ZERO,
                    (Some((false, d)), _) => d,
                    (
                        Some((true, d)),
                        WindowKind::Tumbling { size: grid }
                        | WindowKind::Hopping { slide: grid, .. },
                    ) => {
                        let (d, grid) = (d.as_millis(), grid.as_millis());
                        Duration::from_millis(((grid - d % grid) % grid) as u64)
                    }
                    (Some((true, d)), _) => d,
                };
                let partition = self.partitions.remove(&called_at);
                if partition.is_some() && fname != "SESSION" {
                    return Err(self.err(format!(
                        "`{text}` ({at}): PARTITION BY keys a SESSION only; {fname}'s windows \
                         are the same for every key: group by the columns instead"
                    )));
                }
                *t = TableFactor::Table {
                    name: ObjectName(vec![ObjectNamePart::Identifier(
                        written.unwrap_or_else(|| Ident::new(&source)),
                    )]),
                    alias,
                    args: None,
                    with_hints: Vec::new(),
                    version: None,
                    with_ordinality: false,
                    partitions: Vec::new(),
                    json_path: None,
                    sample: None,
                    index_hints: Vec::new(),
                };
                self.names.insert("window_start".into(), Bound::Start);
                self.names.insert("window_end".into(), Bound::End);
                self.names.insert("window_time".into(), Bound::Time);
                self.declared.push(Declared {
                    text,
                    at,
                    source: Some(source),
                    time,
                    kind,
                    offset,
                    partition,
                });
                Ok(Some(self.declared.len() - 1))
            }
            TableFactor::Derived { subquery, .. } => {
                self.query(subquery, false)?;
                Ok(None)
            }
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => {
                let mut found = self.factor(&mut table_with_joins.relation)?;
                for j in &mut table_with_joins.joins {
                    found = found.or(self.factor(&mut j.relation)?);
                    self.join(&mut j.join_operator)?;
                }
                Ok(found)
            }
            _ => Ok(None),
        }
    }

    fn join(&mut self, op: &mut JoinOperator) -> Result<()> {
        let c = match op {
            JoinOperator::Join(c)
            | JoinOperator::Inner(c)
            | JoinOperator::Left(c)
            | JoinOperator::LeftOuter(c)
            | JoinOperator::Right(c)
            | JoinOperator::RightOuter(c)
            | JoinOperator::FullOuter(c)
            | JoinOperator::CrossJoin(c)
            | JoinOperator::Semi(c)
            | JoinOperator::LeftSemi(c)
            | JoinOperator::RightSemi(c)
            | JoinOperator::Anti(c)
            | JoinOperator::LeftAnti(c)
            | JoinOperator::RightAnti(c) => c,
            _ => return Ok(()),
        };
        if let JoinConstraint::On(e) = c {
            self.subqueries(e)?;
            let on = std::mem::replace(e, Expr::value(Value::Boolean(true)));
            *e = self
                .strip_equal_bounds(on, "a join condition")?
                .unwrap_or_else(|| Expr::value(Value::Boolean(true)));
        }
        Ok(())
    }

    /// A `HOP` call's window (`call`: as written, where, and its usage;
    /// `nth`: which arguments the slide and size are): a slide longer than
    /// the size, or one putting a row in too many windows, is refused.
    fn hopping(
        &self,
        (text, at, usage): (&str, &str, &str),
        slide: Duration,
        size: Duration,
        nth: (&str, &str),
    ) -> Result<WindowKind> {
        if slide > size {
            return Err(self.err(format!(
                "`{text}` ({at}): the slide ({} argument) must not exceed the size ({}): \
                 {usage}",
                nth.0, nth.1
            )));
        }
        let n = windows_per_row(size, slide);
        if n > MAX_WINDOWS_PER_ROW {
            return Err(self.err(format!(
                "`{text}` ({at}) puts each row in up to {n} windows (size / slide); at most \
                 {MAX_WINDOWS_PER_ROW} are allowed: a longer slide or a shorter size"
            )));
        }
        Ok(WindowKind::Hopping { size, slide })
    }

    /// Flink's legacy group window call `f` (`TUMBLE(time, size)`, `HOP(time,
    /// slide, size)`, `SESSION(time, gap)`, or their `_START`/`_END`
    /// functions, which take the same arguments), its window function being
    /// `name`: the window and its time column.
    fn legacy_window(&self, f: &Function, name: &str) -> Result<(WindowKind, String)> {
        let text = f.to_string();
        let at = position(f);
        let (count, usage) = match name {
            "TUMBLE" => (2, "TUMBLE(time_column, INTERVAL size)"),
            "HOP" => (3, "HOP(time_column, INTERVAL slide, INTERVAL size)"),
            _ => (2, "SESSION(time_column, INTERVAL gap)"),
        };
        let args = call_args(self.view, f, name)?;
        if args.len() != count {
            return Err(self.err(format!(
                "`{text}` ({at}) takes {count} arguments in GROUP BY (Flink's group \
                 window): {usage}"
            )));
        }
        let Some(time) = ident_of(args[0]) else {
            return Err(self.err(format!(
                "`{text}` ({at}): the first argument names the event-time column: {usage}"
            )));
        };
        let what = format!("`{text}`");
        let kind = match name {
            "TUMBLE" => WindowKind::Tumbling {
                size: interval(self.view, &what, args[1])?,
            },
            "HOP" => self.hopping(
                (&text, &at, usage),
                interval(self.view, &what, args[1])?,
                interval(self.view, &what, args[2])?,
                ("second", "third"),
            )?,
            _ => WindowKind::Session {
                gap: interval(self.view, &what, args[1])?,
                key: Vec::new(),
            },
        };
        Ok((kind, time))
    }

    /// Flink's legacy group window `f` in `GROUP BY` (see
    /// [`Self::legacy_window`]): the query's window, whose bounds its
    /// `_START` and `_END` functions select.
    fn group_window(&mut self, f: &Function, name: &str) -> Result<()> {
        let (kind, time) = self.legacy_window(f, name)?;
        self.declared.push(Declared {
            text: f.to_string(),
            at: position(f),
            source: None,
            time,
            kind,
            offset: Duration::ZERO,
            partition: None,
        });
        Ok(())
    }

    /// The bound a call to Flink's `TUMBLE_START`, `HOP_END`, … denotes: the
    /// function's prefix and suffix, upper-case (`None` if `f` is no such
    /// call).
    fn legacy_bound_name(f: &Function) -> Option<(&'static str, &'static str)> {
        let name = f.name.to_string().to_ascii_uppercase();
        let (window, part) = name.split_once('_')?;
        let window = FUNCTIONS.into_iter().find(|w| *w == window)?;
        let part = ["START", "END", "ROWTIME", "PROCTIME"]
            .into_iter()
            .find(|p| *p == part)?;
        Some((window, part))
    }

    /// Whether the call `f` to `TUMBLE_START`, `HOP_END`, … selects a bound
    /// of a window the query declares (the same window over the same time
    /// column), and which.
    fn legacy_bound(&self, f: &Function) -> Option<Bound> {
        let (window, part) = Self::legacy_bound_name(f)?;
        let bound = match part {
            "START" => Bound::Start,
            "END" => Bound::End,
            "ROWTIME" => Bound::Time,
            _ => return None,
        };
        let (kind, time) = self.legacy_window(f, window).ok()?;
        let same = |d: &Declared| match (&d.kind, &kind) {
            (WindowKind::Session { gap: a, .. }, WindowKind::Session { gap: b, .. }) => a == b,
            (a, b) => a == b,
        };
        self.declared
            .iter()
            .any(|d| d.time.eq_ignore_ascii_case(&time) && d.offset.is_zero() && same(d))
            .then_some(bound)
    }

    /// A call to `TUMBLE_START`, `HOP_END`, … in the select list that is not
    /// a bound of the window the query declares, or one to a `_PROCTIME`
    /// function (Þund's windows are in event time): an error that says what
    /// to select.
    fn unknown_legacy_bound(&self, e: &Expr) -> Result<()> {
        let Expr::Function(f) = e else {
            return Ok(());
        };
        let Some((window, part)) = Self::legacy_bound_name(f) else {
            return Ok(());
        };
        if self.legacy_bound(f).is_some() {
            return Ok(());
        }
        let at = position(f);
        if part == "PROCTIME" {
            return Err(self.err(format!(
                "`{f}` ({at}): windows are in event time, and have no processing time; \
                 select {window}_ROWTIME (the window's last millisecond) or {window}_END"
            )));
        }
        // (what is wrong with its arguments, if anything)
        self.legacy_window(f, window)?;
        Err(self.err(format!(
            "`{f}` ({at}) is not a bound of the window the query declares ({}): give it \
             the arguments of the query's `GROUP BY {window}(…)`",
            self.declared_or(&format!("none: group by `{window}(…)` to declare one"))
        )))
    }

    /// The windows the query declares, as written and where, or `none` if
    /// it declares none yet.
    fn declared_or(&self, none: &str) -> String {
        match self.declared.is_empty() {
            true => none.to_string(),
            false => (self.declared.iter())
                .map(|d| format!("`{}` ({})", d.text, d.at))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// A `date_bin(INTERVAL …, time)` call: a tumbling window.
    fn date_bin(&mut self, f: &Function) -> Result<()> {
        let text = f.to_string();
        let at = position(f);
        let args = call_args(self.view, f, "date_bin")?;
        if !(2..=3).contains(&args.len()) {
            return Err(self.err(format!(
                "`{text}` ({at}): date_bin takes (INTERVAL size, time_column [, TIMESTAMP origin])"
            )));
        }
        let Some(time) = ident_of(args[1]) else {
            return Err(self.err(format!(
                "`{text}` ({at}): the second argument names the event-time column"
            )));
        };
        let size = interval(self.view, &format!("`{text}`"), args[0])?;
        let offset = match args.get(2) {
            None => Duration::ZERO,
            Some(origin) => origin_offset(origin, size)
                .map_err(|m| self.err(format!("`{text}` ({at}): the origin {m}")))?,
        };
        self.declared.push(Declared {
            text,
            at,
            source: None,
            time,
            kind: WindowKind::Tumbling { size },
            offset,
            partition: None,
        });
        Ok(())
    }

    fn select(&mut self, s: &mut Select, top: bool) -> Result<Vec<Slot>> {
        // what the subqueries before this one in the parent's FROM hide
        let before = self.hidden.take();
        let mut here = Vec::new();
        for twj in &mut s.from {
            if let Some(i) = self.factor(&mut twj.relation)? {
                here.push(i);
            }
            for j in &mut twj.joins {
                if let Some(i) = self.factor(&mut j.relation)? {
                    here.push(i);
                }
                self.join(&mut j.join_operator)?;
            }
        }
        let from_hidden = self.hidden.take();
        // what this select hides from a `*` over it
        let mut hides: Option<String> = None;
        // GROUP BY first: a date_bin there declares the window
        let mut keys: Vec<String> = Vec::new();
        let mut computed: Option<String> = None;
        if let GroupByExpr::Expressions(exprs, _) = &mut s.group_by {
            let mut kept = Vec::new();
            for e in exprs.drain(..) {
                // Flink's legacy group windows (`GROUP BY TUMBLE(ts, INTERVAL …)`)
                if let Expr::Function(f) = &e {
                    let name = f.name.to_string().to_ascii_uppercase();
                    if FUNCTIONS.contains(&name.as_str()) {
                        self.group_window(f, &name)?;
                        here.push(self.declared.len() - 1);
                        continue;
                    }
                }
                if let Some(f) = is_date_bin(&e) {
                    self.date_bin(f)?;
                    here.push(self.declared.len() - 1);
                    continue;
                }
                if self.bound(&e).is_some() {
                    continue;
                }
                self.no_bound_in(&e, "GROUP BY")?;
                if ident_of(&e).is_none() && computed.is_none() {
                    computed = Some(format!("`{e}` ({})", position(&e)));
                }
                keys.push(ident_of(&e).unwrap_or_else(|| e.to_string()));
                kept.push(e);
            }
            *exprs = kept;
        }
        // a session's key: its PARTITION BY, or the other GROUP BY columns
        for &i in &here {
            let d = &mut self.declared[i];
            if let WindowKind::Session { key, .. } = &mut d.kind {
                if let (Some(e), None) = (&computed, &d.partition) {
                    return Err(Error::spec(
                        self.view,
                        format!(
                            "`{}` ({}): a session's key is the query's other GROUP BY \
                             columns, and {e} is not a column: compute it in a subquery \
                             and group by its name",
                            d.text, d.at
                        ),
                    ));
                }
                // Flink's PARTITION BY keys the sessions; the query may group
                // each session's rows by more columns (they must include the
                // partition's, or sessions of two keys would share a group)
                let Some(cols) = &d.partition else {
                    *key = keys.clone();
                    continue;
                };
                let missing: Vec<&String> = cols
                    .iter()
                    .filter(|c| !keys.iter().any(|k| c.eq_ignore_ascii_case(k)))
                    .collect();
                if !missing.is_empty() {
                    return Err(Error::spec(
                        self.view,
                        format!(
                            "`{}` ({}): its PARTITION BY ({}) must be among the query's other \
                             GROUP BY columns ({}): group by {} too, or sessions of two keys \
                             would share a group",
                            d.text,
                            d.at,
                            cols.join(", "),
                            match keys.is_empty() {
                                true => "none".to_string(),
                                false => keys.join(", "),
                            },
                            missing
                                .iter()
                                .map(|c| format!("`{c}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                // (as the query reads them: the GROUP BY's spelling)
                *key = keys
                    .iter()
                    .filter(|k| cols.iter().any(|c| c.eq_ignore_ascii_case(k)))
                    .cloned()
                    .collect();
            }
        }
        for item in &mut s.projection {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    self.subqueries(e)?
                }
                _ => {}
            }
        }
        if let Some(w) = &mut s.selection {
            self.subqueries(w)?;
        }
        if let Some(h) = &mut s.having {
            self.subqueries(h)?;
        }
        let mut slots = Vec::new();
        let mut kept = Vec::new();
        for item in s.projection.drain(..) {
            let (e, alias) = match &item {
                SelectItem::UnnamedExpr(e) => (e, None),
                SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
                SelectItem::ExprWithAliases { expr, .. } => {
                    self.no_bound_in(expr, "the select list")?;
                    slots.push(Slot::Query);
                    kept.push(item);
                    continue;
                }
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                    let over = match here.first() {
                        Some(&i) => Some(format!("the bounds of `{}`", self.declared[i].text)),
                        None => from_hidden.clone().or(self.hidden_in_with.clone()),
                    };
                    match (top, over) {
                        (false, over) => hides = hides.or(over),
                        (true, Some(h)) if here.is_empty() => {
                            return Err(self.err(format!(
                                "`{item}` in the select list is over a subquery that selects \
                                 {h}: the bounds are taken out of it (every output row \
                                 carries its window's), so `*` would not show them; name the \
                                 columns, e.g. `x.window_start`"
                            )))
                        }
                        _ => {}
                    }
                    slots.push(Slot::Rest);
                    if !here.is_empty() {
                        // Flink's window table functions add their bounds and
                        // `window_time` after the source's columns
                        slots.push(Slot::Bound(Bound::Start, "window_start".into()));
                        slots.push(Slot::Bound(Bound::End, "window_end".into()));
                        slots.push(Slot::Bound(Bound::Time, "window_time".into()));
                    }
                    kept.push(item);
                    continue;
                }
            };
            if let Some(f) = is_date_bin(e).filter(|f| !self.is_declared_bin(f)) {
                return Err(self.err(format!(
                    "`{f}` ({}) in the select list is not the window the query declares \
                     ({}): select that window's date_bin, or window_start",
                    position(f),
                    self.declared_or("none: group by a date_bin to declare one")
                )));
            }
            self.unknown_legacy_bound(e)?;
            if let Some(b) = self.bound(e) {
                let shown = match (&alias, ident_of(e)) {
                    (Some(a), _) => a.clone(),
                    (None, Some(n)) if is_date_bin(e).is_none() => n,
                    _ => e.to_string(),
                };
                if let Some(a) = &alias {
                    self.names.insert(a.to_ascii_lowercase(), b);
                }
                hides = hides.or(Some(format!("`{item}` ({})", position(e))));
                slots.push(Slot::Bound(b, shown));
                continue;
            }
            self.no_bound_in(e, "the select list")?;
            slots.push(Slot::Query);
            kept.push(item);
        }
        s.projection = kept;
        if s.projection.is_empty() {
            return Err(self.err(
                "the query selects only window bounds: select at least one other column \
                 (every output row carries its window's bounds)"
                    .into(),
            ));
        }
        if let Some(w) = s.selection.take() {
            s.selection = self.strip_equal_bounds(w, "WHERE")?;
        }
        if let Some(h) = &s.having {
            self.no_bound_in(h, "HAVING")?;
        }
        // (what subqueries in WHERE or HAVING hide shows nowhere)
        self.hidden = before.or(hides);
        Ok(if top { slots } else { Vec::new() })
    }
}
