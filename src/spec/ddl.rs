//! A whole pipeline as SQL DDL, in one text:
//!
//! ```sql
//! CREATE SOURCE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP,
//!                     WATERMARK FOR ts AS ts - INTERVAL '4' SECOND) WITH (idle_timeout = '30s');
//! CREATE VIEW hot_items WITH (output = 'append') AS
//!   SELECT auction, window_start, window_end, COUNT(*) AS num
//!   FROM HOP(bids, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
//!   GROUP BY auction, window_start, window_end;
//! ```
//!
//! * `CREATE SOURCE name (column TYPE [NOT NULL], …, WATERMARK FOR column
//!   AS column [- INTERVAL …]) [WITH (idle_timeout = '…', advance_when_idle = true)]`: the column
//!   types of a TOML `schema` (BIGINT, INT, DOUBLE, VARCHAR, BOOLEAN,
//!   TIMESTAMP, DATE, DECIMAL(p,s), …); the watermark names the event-time
//!   column, and the interval subtracted is the allowed lateness.
//! * `CREATE VIEW name [WITH (output = 'append'|'update'|'complete', mode =
//!   'auto'|'recompute')] AS query`: the view reads the declared sources its
//!   query names, and takes their watermark (a view over sources with
//!   different watermarks is refused); its window is declared in the query
//!   (`TUMBLE`, `HOP`, `SESSION`, `date_bin`: see `window_sql`) or it has none.
//!
//! Errors name the statement (its number and first words) and the token
//! where it went wrong, with line and column.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::time::Duration;

use arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, ObjectNamePart, TableFactor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Word};

use crate::error::{Error, Result};
use crate::spec::{ExecMode, OutputMode, Retention, SourceSpec, ViewSpec, WatermarkSpec};

/// What a DDL text declares.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// The sources, with their watermarks.
    pub sources: Vec<(SourceSpec, WatermarkSpec)>,
    /// The views, in the order declared.
    pub views: Vec<ViewSpec>,
    /// Where each view's query starts, to place what is refused of it later
    /// (see [`Pipeline::placed`]).
    places: Vec<Place>,
}

/// A view's statement, where its query starts, and the query's tokens.
#[derive(Clone, Debug)]
struct Place {
    statement: usize,
    head: String,
    at: Location,
    query: Vec<TokenWithSpan>,
}

impl Place {
    /// Where in the query as written the name `e` is about stands: the
    /// column DataFusion did not find (or found twice), or the function it
    /// does not know (or Þund refuses as nondeterministic). The query
    /// DataFusion planned may be the lowered one (without its window call),
    /// so the name is looked up in the written tokens: a qualified column
    /// where its qualifier precedes it, else its first use that is not an
    /// alias (`AS name`). `None` when the error names nothing, or nothing the
    /// query writes.
    fn named(&self, e: &Error) -> Option<Location> {
        use datafusion::common::SchemaError;
        use datafusion::error::DataFusionError;
        let Error::Sql { source, .. } = e else {
            return None;
        };
        let words = |i: usize| match self.query.get(i).map(|t| &t.token) {
            Some(Token::Word(w)) => Some(w),
            _ => None,
        };
        let is = |t: Option<&TokenWithSpan>, want: &Token| t.is_some_and(|t| &t.token == want);
        let uses = |name: &str| -> Vec<usize> {
            (0..self.query.len())
                .filter(|&i| {
                    words(i).is_some_and(|w| ident(w) == name)
                        && !(i > 0
                            && words(i - 1).is_some_and(|w| w.value.eq_ignore_ascii_case("AS")))
                })
                .collect()
        };
        let found = match source.find_root() {
            DataFusionError::SchemaError(schema, _) => {
                let (SchemaError::FieldNotFound { field, .. }
                | SchemaError::AmbiguousReference { field }) = schema.as_ref()
                else {
                    return None;
                };
                // (a use is qualified when a period precedes it)
                let all = uses(&field.name);
                let dot = |i: usize| i >= 2 && is(self.query.get(i - 1), &Token::Period);
                let best = match &field.relation {
                    Some(r) => all
                        .iter()
                        .find(|&&i| dot(i) && words(i - 2).is_some_and(|w| ident(w) == r.table())),
                    None => all.iter().find(|&&i| !dot(i)),
                };
                best.or(all.first()).copied()
            }
            DataFusionError::Plan(m) => {
                let name = m
                    .strip_prefix("Invalid function '")
                    .or_else(|| m.strip_prefix(crate::paths::sql::NONDETERMINISTIC))?
                    .split('\'')
                    .next()?;
                let name = name.to_ascii_lowercase();
                let all = uses(&name);
                // a call, else a use without parentheses (`CURRENT_DATE`)
                all.iter()
                    .find(|&&i| is(self.query.get(i + 1), &Token::LParen))
                    .or(all.first())
                    .copied()
            }
            _ => None,
        }?;
        Some(self.query[found].span.start)
    }
}

impl Pipeline {
    /// `e`, an error of the `i`-th view found once the text parsed (its SQL
    /// planned over its sources' columns and types), placed where that
    /// view's query starts, as a parse error of it would be, or at the
    /// column or function the error names where the query writes it.
    pub(crate) fn placed(&self, i: usize, e: Error) -> Error {
        match (self.places.get(i), e) {
            (Some(p), e) if !matches!(e, Error::Ddl { .. }) => {
                let (message, called) = relocated(&e.to_string(), p.at);
                let at = p.named(&e).or(called).unwrap_or(p.at);
                Error::Ddl {
                    statement: p.statement,
                    line: at.line,
                    column: at.column,
                    message: format!("{message} (in statement {}: `{}`)", p.statement, p.head),
                }
            }
            (_, e) => e,
        }
    }
}

/// The error of a DDL text: which statement, which token, where.
fn err(stmt: &Stmt<'_>, at: Location, message: impl std::fmt::Display) -> Error {
    Error::Ddl {
        statement: stmt.number,
        line: at.line,
        column: at.column,
        message: format!(
            "{message} (in statement {}: `{}`)",
            stmt.number,
            stmt.head()
        ),
    }
}

/// `message` with every position counted from a view's query (`(line L,
/// column C` as the window calls' errors write it, `Line: L, Column: C` as
/// the SQL parser's do) counted in the text instead, the query starting at
/// `query`; and the first such position, where the error then points.
fn relocated(message: &str, query: Location) -> (String, Option<Location>) {
    let mut out = String::with_capacity(message.len());
    let mut first = None;
    let mut rest = message;
    'scan: while !rest.is_empty() {
        for (line_word, column_word) in [("(line ", ", column "), ("Line: ", ", Column: ")] {
            let Some(after) = rest.strip_prefix(line_word) else {
                continue;
            };
            let digits = |t: &str| t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let l = digits(after);
            let Some(after_l) = after[l..].strip_prefix(column_word) else {
                continue;
            };
            let c = digits(after_l);
            let (Ok(line), Ok(column)) = (after[..l].parse::<u64>(), after_l[..c].parse::<u64>())
            else {
                continue;
            };
            // (saturating: a message may quote SQL text that only looks like a position)
            let at = match line {
                1 => Location::new(
                    query.line,
                    query.column.saturating_add(column.saturating_sub(1)),
                ),
                _ => Location::new(query.line.saturating_add(line.saturating_sub(1)), column),
            };
            first.get_or_insert(at);
            out.push_str(&format!("{line_word}{}{column_word}{}", at.line, at.column));
            rest = &after_l[c..];
            continue 'scan;
        }
        let ch = rest.chars().next().unwrap_or_default();
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    (out, first)
}

/// One statement's tokens (no whitespace), with the text they came from.
struct Stmt<'a> {
    number: usize,
    tokens: Vec<TokenWithSpan>,
    text: &'a str,
    offsets: &'a Offsets,
}

impl Stmt<'_> {
    /// The statement's first words, to name it.
    fn head(&self) -> String {
        let words: Vec<String> = self
            .tokens
            .iter()
            .take(3)
            .map(|t| t.token.to_string())
            .collect();
        words.join(" ")
    }
}

/// Byte offsets of (line, column) locations in a text (1-based, columns in characters).
struct Offsets {
    lines: Vec<usize>,
}

impl Offsets {
    fn new(text: &str) -> Self {
        let mut lines = vec![0];
        lines.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Offsets { lines }
    }

    fn of(&self, text: &str, at: Location) -> usize {
        let Some(&start) = (at.line as usize)
            .checked_sub(1)
            .and_then(|l| self.lines.get(l))
        else {
            return text.len();
        };
        let col = (at.column as usize).saturating_sub(1);
        text[start..]
            .char_indices()
            .nth(col)
            .map_or(text.len(), |(i, _)| start + i)
    }
}

/// A cursor over a statement's tokens.
struct Cursor<'s, 'a> {
    stmt: &'s Stmt<'a>,
    at: usize,
}

impl Cursor<'_, '_> {
    fn peek(&self) -> Option<&TokenWithSpan> {
        self.stmt.tokens.get(self.at)
    }

    fn here(&self) -> Location {
        match self.peek() {
            Some(t) => t.span.start,
            None => self
                .stmt
                .tokens
                .last()
                .map_or(Location::new(1, 1), |t| t.span.end),
        }
    }

    fn fail<T>(&self, m: impl std::fmt::Display) -> Result<T> {
        Err(err(self.stmt, self.here(), m))
    }

    fn next(&mut self) -> Option<&TokenWithSpan> {
        let t = self.stmt.tokens.get(self.at);
        self.at += usize::from(t.is_some());
        t
    }

    /// The next token if it is the keyword `kw` (any case).
    fn keyword(&mut self, kw: &str) -> bool {
        match self.peek() {
            Some(TokenWithSpan {
                token: Token::Word(w),
                ..
            }) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn expect_keyword(&mut self, kw: &str, what: &str) -> Result<()> {
        if self.keyword(kw) {
            return Ok(());
        }
        let found = self.describe();
        self.fail(format!("expected {what} `{kw}`, found {found}"))
    }

    fn expect(&mut self, t: Token, what: &str) -> Result<()> {
        if self.peek().is_some_and(|x| x.token == t) {
            self.at += 1;
            return Ok(());
        }
        let found = self.describe();
        self.fail(format!("expected {what}, found {found}"))
    }

    fn describe(&self) -> String {
        match self.peek() {
            Some(t) => format!("`{}`", t.token),
            None => "the end of the statement".to_string(),
        }
    }

    /// A name (identifier).
    fn name(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Some(TokenWithSpan {
                token: Token::Word(w),
                ..
            }) => {
                let v = w.value.clone();
                self.at += 1;
                Ok(v)
            }
            _ => {
                let found = self.describe();
                self.fail(format!("expected {what}, found {found}"))
            }
        }
    }

    /// The tokens up to the `)` that closes the one just read, split at
    /// top-level commas.
    fn parenthesized(&mut self) -> Result<Vec<Vec<TokenWithSpan>>> {
        let mut parts = vec![Vec::new()];
        let mut depth = 0usize;
        loop {
            let Some(t) = self.next().cloned() else {
                return self.fail("expected `)`, found the end of the statement");
            };
            match t.token {
                Token::RParen if depth == 0 => return Ok(parts),
                Token::Comma if depth == 0 => {
                    parts.push(Vec::new());
                    continue;
                }
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            if let Some(p) = parts.last_mut() {
                p.push(t);
            }
        }
    }

    /// `WITH (key = 'value', …)`, if present: the pairs with where each key is.
    fn options(&mut self) -> Result<Vec<(String, String, Location)>> {
        if !self.keyword("WITH") {
            return Ok(Vec::new());
        }
        self.expect(Token::LParen, "`(` after WITH")?;
        let mut out = Vec::new();
        for part in self.parenthesized()? {
            let at = part.first().map_or(self.here(), |t| t.span.start);
            // the key bare or quoted, as Flink writes it (`'idle_timeout' = '30s'`)
            let key = |t: &Token| match t {
                Token::Word(k) => Some(k.value.to_ascii_lowercase()),
                Token::SingleQuotedString(k) => Some(k.to_ascii_lowercase()),
                _ => None,
            };
            let pair = match part.as_slice() {
                [k, TokenWithSpan {
                    token: Token::Eq, ..
                }, v] => key(&k.token).zip(match &v.token {
                    Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Some(s.clone()),
                    Token::Number(n, _) => Some(n.clone()),
                    Token::Word(w) => Some(w.value.clone()),
                    _ => None,
                }),
                _ => None,
            };
            match pair {
                Some((k, _)) if out.iter().any(|(o, _, _)| *o == k) => {
                    return Err(err(self.stmt, at, format!("option `{k}` is given twice")))
                }
                Some((k, v)) => out.push((k, v, at)),
                None => return Err(err(self.stmt, at, "expected `key = 'value'` in WITH (…)")),
            }
        }
        Ok(out)
    }
}

/// The text of tokens `ts` as written.
fn text_of(stmt: &Stmt<'_>, ts: &[TokenWithSpan]) -> String {
    match (ts.first(), ts.last()) {
        (Some(a), Some(b)) => {
            let from = stmt.offsets.of(stmt.text, a.span.start);
            let to = stmt.offsets.of(stmt.text, b.span.end);
            stmt.text
                .get(from..to.max(from))
                .unwrap_or_default()
                .to_string()
        }
        _ => String::new(),
    }
}

/// A column's name as the view's SQL (DataFusion, like PostgreSQL) reads an
/// identifier: as written in double quotes, else with its ASCII letters in
/// lower case (DataFusion leaves `Ü` as it is) — so `CREATE SOURCE s
/// (Auction BIGINT, …)` declares `auction`, which `SELECT Auction` finds,
/// and `"Auction"` declares `Auction`.
fn ident(w: &Word) -> String {
    match w.quote_style {
        Some(_) => w.value.clone(),
        None => w.value.to_ascii_lowercase(),
    }
}

/// A duration option or interval text (`'30s'`, `'4' SECOND` is handled by the watermark).
fn duration(stmt: &Stmt<'_>, at: Location, what: &str, v: &str) -> Result<Duration> {
    let d = super::duration::parse(v).map_err(|b| match b {
        super::duration::Bad::Parse(e) => {
            err(stmt, at, format!("{what} `{v}` is not a duration ({e})"))
        }
        b => err(stmt, at, format!("{what} `{v}`: {b}")),
    })?;
    match super::too_large(d) {
        Some(m) => Err(err(stmt, at, format!("{what} `{v}` {m}"))),
        None => Ok(d),
    }
}

/// `WATERMARK FOR col AS col [- INTERVAL '…' UNIT]`: the column and the lateness.
fn watermark(stmt: &Stmt<'_>, part: &[TokenWithSpan]) -> Result<(String, Duration)> {
    let words: Vec<&TokenWithSpan> = part.iter().collect();
    let bad = |i: usize, m: &str| {
        let at = words.get(i).map_or(part[0].span.end, |t| t.span.start);
        err(
            stmt,
            at,
            format!("{m}: expected `WATERMARK FOR column AS column [- INTERVAL '…' UNIT]`"),
        )
    };
    let word = |i: usize| match words.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) => Some(w.value.clone()),
        _ => None,
    };
    let column = |i: usize| match words.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) => Some(ident(w)),
        _ => None,
    };
    if !word(1).is_some_and(|w| w.eq_ignore_ascii_case("FOR")) {
        return Err(bad(1, "`FOR` missing"));
    }
    let col = column(2).ok_or_else(|| bad(2, "the event-time column is missing"))?;
    if !word(3).is_some_and(|w| w.eq_ignore_ascii_case("AS")) {
        return Err(bad(3, "`AS` missing"));
    }
    let again = column(4).ok_or_else(|| bad(4, "the column is missing after AS"))?;
    if again != col {
        return Err(bad(
            4,
            &format!("the watermark of `{col}` must be `{col}` or `{col} - INTERVAL …`, not of `{again}`"),
        ));
    }
    if words.len() == 5 {
        return Ok((col, Duration::ZERO));
    }
    if words.get(5).map(|t| &t.token) != Some(&Token::Minus) {
        return Err(bad(5, "only an interval may be subtracted"));
    }
    // the interval, parsed as SQL
    let text = text_of(stmt, &part[6..]);
    let e = Parser::new(&GenericDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| bad(6, &format!("`{text}` is not an interval ({e})")))?;
    let d = super::window_sql::interval_or_zero(&e).map_err(|m| {
        err(
            stmt,
            part[6].span.start,
            format!("the watermark's interval: {m}"),
        )
    })?;
    Ok((col, d))
}

/// `CREATE SOURCE …` after its name.
fn source(c: &mut Cursor<'_, '_>, name: String) -> Result<(SourceSpec, WatermarkSpec)> {
    let stmt = c.stmt;
    c.expect(Token::LParen, "`(` and the source's columns")?;
    let parts = c.parenthesized()?;
    let mut fields: Vec<Field> = Vec::new();
    let mut wm: Option<(String, Duration, Location)> = None;
    for part in &parts {
        let Some(first) = part.first() else {
            return c.fail("an empty column definition");
        };
        let is_wm = matches!(&first.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("WATERMARK"));
        if is_wm {
            if wm.is_some() {
                return Err(err(
                    stmt,
                    first.span.start,
                    "a second WATERMARK: a source has one event time",
                ));
            }
            let (col, d) = watermark(stmt, part)?;
            wm = Some((col, d, first.span.start));
            continue;
        }
        let text = text_of(stmt, part);
        // the name, read as the view's SQL reads it (see `ident`), then its type
        let name = match &first.token {
            Token::Word(w) => ident(w),
            _ => {
                return Err(err(
                    stmt,
                    first.span.start,
                    format!("column `{text}`: expected a column name first"),
                ))
            }
        };
        // Flink's column forms Þund does not read, said as such
        let word = |i: usize, w: &str| matches!(part.get(i).map(|t| &t.token), Some(Token::Word(x)) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
        let refuse = |why: &str| {
            Err(err(
                stmt,
                first.span.start,
                format!("column `{text}`: {why}"),
            ))
        };
        if word(0, "PRIMARY") || word(0, "CONSTRAINT") {
            return refuse(
                "a source is append-only: a PRIMARY KEY would declare an upsert (changelog) \
                 source, which Þund does not read; remove it",
            );
        }
        if word(1, "AS") {
            return refuse(
                "computed columns are not read: compute it in the view's query \
                 (SELECT …, expression AS name), or in the file",
            );
        }
        if (1..part.len()).any(|i| word(i, "METADATA")) {
            return refuse(
                "a Flink connector's METADATA column: Þund reads the file's columns only",
            );
        }
        // `COMMENT '…'` after the type documents the column
        let part = match part.len().checked_sub(2).map(|i| (i, &part[i..])) {
            Some((
                i,
                [c, TokenWithSpan {
                    token: Token::SingleQuotedString(_),
                    ..
                }],
            )) if matches!(&c.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("COMMENT")) => {
                &part[..i]
            }
            _ => &part[..],
        };
        // (one space between words: `NOT  NULL` is `NOT NULL`)
        let mut ty = text_of(stmt, &part[1..])
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut nullable = true;
        let upper = ty.to_ascii_uppercase();
        if let Some(stripped) = upper.strip_suffix(" NOT NULL") {
            ty.truncate(stripped.len());
            nullable = false;
        } else if let Some(stripped) = upper.strip_suffix(" NULL") {
            // (NULL says what the default is)
            ty.truncate(stripped.len());
        }
        let dt = match ty.trim() {
            "" => Err("its type is missing".to_string()),
            ty => super::schema::parse_type(ty),
        }
        .map_err(|m| err(stmt, first.span.start, format!("column `{text}`: {m}")))?;
        if fields.iter().any(|g| g.name() == &name) {
            return Err(err(
                stmt,
                first.span.start,
                format!("column `{name}` is declared twice"),
            ));
        }
        fields.push(Field::new(name, dt, nullable));
    }
    let Some((event_time, lateness, at)) = wm else {
        return c.fail(format!(
            "source `{name}` declares no event time: add `WATERMARK FOR column AS column - INTERVAL …` to its columns"
        ));
    };
    let Some(time) = fields.iter().find(|f| f.name() == &event_time) else {
        return Err(err(
            stmt,
            at,
            format!("WATERMARK FOR `{event_time}`: source `{name}` has no such column"),
        ));
    };
    if !crate::time::is_event_time_type(time.data_type()) {
        return Err(err(
            stmt,
            at,
            format!(
                "WATERMARK FOR `{event_time}`: the column is {}; event time must be a \
                 TIMESTAMP, a DATE or an integer of milliseconds (BIGINT)",
                time.data_type()
            ),
        ));
    }
    let mut mark = WatermarkSpec {
        allowed_lateness: lateness,
        ..WatermarkSpec::default()
    };
    for (k, v, at) in c.options()? {
        match k.as_str() {
            "idle_timeout" => mark.idle_timeout = duration(stmt, at, "idle_timeout", &v)?,
            "advance_when_idle" => {
                mark.advance_when_idle = match v.to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(err(
                            stmt,
                            at,
                            format!("advance_when_idle = '{v}': write true or false"),
                        ))
                    }
                }
            }
            other => {
                return Err(err(
                    stmt,
                    at,
                    match other {
                        // Flink's table options: Þund's sources come from the
                        // program or `thund run --input`, not from a connector
                        "connector" | "format" | "topic" | "path" | "properties.bootstrap.servers"
                        | "scan.startup.mode" => format!(
                            "`{other}` is a Flink connector option: a Þund source's rows come from \
                             `thund run --input {}=FILE` or the program that pushes them; \
                             remove it (known options: idle_timeout, advance_when_idle)",
                            name
                        ),
                        _ => format!(
                            "unknown source option `{other}` (known: idle_timeout, advance_when_idle)"
                        ),
                    },
                ));
            }
        }
    }
    if c.peek().is_some() {
        let found = c.describe();
        return c.fail(format!("expected the end of the statement, found {found}"));
    }
    let schema = std::sync::Arc::new(Schema::new(fields));
    Ok((SourceSpec::new(&name, &event_time, schema), mark))
}

/// The tables a query reads (a window function, `TUMBLE(bids, …)` or
/// Flink's `TUMBLE(TABLE bids, …)`, reads its first argument), or the
/// parser's error.
fn tables_read(query: &str) -> std::result::Result<HashSet<String>, String> {
    use datafusion::sql::sqlparser::ast::Visit;
    struct Tables(HashSet<String>);
    impl datafusion::sql::sqlparser::ast::Visitor for Tables {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, args, .. } = t {
                // (the first argument, or the one named DATA wherever it is)
                let list = args.as_ref().map_or(&[][..], |a| &a.args[..]);
                let data = list.iter().find(|a| {
                    matches!(a, FunctionArg::Named { name, .. } if name.value.eq_ignore_ascii_case("data"))
                });
                let read = match data.or(list.first()) {
                    Some(
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(i)))
                        | FunctionArg::Named {
                            arg: FunctionArgExpr::Expr(Expr::Identifier(i)),
                            ..
                        },
                    ) => i.value.clone(),
                    // (the name without its quotes: `"Bids"` reads `Bids`)
                    _ => match name.0.last() {
                        Some(ObjectNamePart::Identifier(i)) => i.value.clone(),
                        _ => name.to_string(),
                    },
                };
                self.0.insert(read.to_ascii_lowercase());
            }
            ControlFlow::Continue(())
        }
    }
    let mut t = Tables(HashSet::new());
    let flink = super::window_sql::flink_arguments(query);
    let text = flink.as_ref().map_or(query, |f| f.sql.as_str());
    let stmts = Parser::parse_sql(&GenericDialect {}, text).map_err(|e| e.to_string())?;
    let _ = stmts.visit(&mut t);
    Ok(t.0)
}

/// `CREATE VIEW …` after its name.
fn view(
    c: &mut Cursor<'_, '_>,
    name: String,
    sources: &[(SourceSpec, WatermarkSpec)],
) -> Result<(ViewSpec, Location, Vec<TokenWithSpan>)> {
    let stmt = c.stmt;
    let mut output = OutputMode::Append;
    let mut mode = ExecMode::Auto;
    let mut retention: Option<(Retention, Location)> = None;
    for (k, v, at) in c.options()? {
        if let Some((_, first)) = retention.filter(|_| k == "retention" || k == "retain_windows") {
            return Err(err(
                stmt,
                at,
                format!(
                    "`{k}` after a retention given at line {}, column {}: keep one",
                    first.line, first.column
                ),
            ));
        }
        match k.as_str() {
            "output" => {
                output = match v.to_ascii_lowercase().as_str() {
                    "append" => OutputMode::Append,
                    "update" => OutputMode::Update,
                    "complete" => OutputMode::Complete,
                    _ => {
                        return Err(err(
                            stmt,
                            at,
                            format!("output `{v}`: expected append, update or complete"),
                        ))
                    }
                }
            }
            "mode" => {
                mode = match v.to_ascii_lowercase().as_str() {
                    "auto" => ExecMode::Auto,
                    "recompute" => ExecMode::Recompute,
                    _ => {
                        return Err(err(
                            stmt,
                            at,
                            format!("mode `{v}`: expected auto or recompute"),
                        ))
                    }
                }
            }
            "retention" => {
                retention = Some((
                    Retention::EventTime(duration(stmt, at, "retention", &v)?),
                    at,
                ))
            }
            "retain_windows" => {
                let n = v.trim().parse::<usize>().map_err(|_| {
                    err(
                        stmt,
                        at,
                        format!("retain_windows `{v}`: expected a number of windows"),
                    )
                })?;
                retention = Some((Retention::Windows(n), at))
            }
            other => {
                return Err(err(
                    stmt,
                    at,
                    format!(
                        "unknown view option `{other}` (known: output, mode, retention, \
                         retain_windows)"
                    ),
                ))
            }
        }
    }
    c.expect_keyword("AS", "the query after")?;
    let at = c.here();
    let sql = text_of(stmt, &stmt.tokens[c.at..]);
    if sql.trim().is_empty() {
        return c.fail("the view has no query after AS");
    }
    if let Some(m) = super::nesting::too_many_operators(&sql) {
        return Err(err(stmt, at, m));
    }
    // (a query that does not parse reads no source it could name)
    let read = tables_read(&sql).map_err(|e| {
        let (e, token) = relocated(&e, at);
        err(
            stmt,
            token.unwrap_or(at),
            format!("the query does not parse ({e})"),
        )
    })?;
    let mine: Vec<&(SourceSpec, WatermarkSpec)> = sources
        .iter()
        .filter(|(s, _)| read.contains(&s.name.to_ascii_lowercase()))
        .collect();
    let Some((_, mark)) = mine.first() else {
        return Err(err(
            stmt,
            at,
            match sources.is_empty() {
                // a text declares its own sources (`CREATE SOURCE` before the view)
                true => format!(
                    "view `{name}` reads no declared source: no `CREATE SOURCE` comes \
                     before it in this text"
                ),
                false => format!(
                    "view `{name}` reads no declared source (declared before it: {})",
                    sources
                        .iter()
                        .map(|(s, _)| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        ));
    };
    if let Some((s, _)) = mine.iter().find(|(_, m)| m != mark) {
        return Err(err(
            stmt,
            at,
            format!(
                "view `{name}` reads `{}` and `{}`, whose watermarks differ: a view has one \
                 allowed lateness, idle timeout and advance_when_idle",
                mine[0].0.name, s.name
            ),
        ));
    }
    let mut b = ViewSpec::builder(&name, sql.trim())
        .allowed_lateness(mark.allowed_lateness)
        .idle_timeout(mark.idle_timeout)
        .advance_when_idle(mark.advance_when_idle)
        .output(output)
        .mode(mode);
    if let Some((r, _)) = retention {
        b = b.retention(r);
    }
    for (s, _) in &mine {
        b = b.source(
            &s.name,
            &s.event_time,
            s.schema
                .clone()
                .unwrap_or_else(|| std::sync::Arc::new(Schema::empty())),
        );
    }
    let query = stmt.tokens[c.at..].to_vec();
    b.build().map(|v| (v, at, query)).map_err(|e| {
        let (e, call) = relocated(&e.to_string(), at);
        err(stmt, call.unwrap_or(at), e)
    })
}

/// Refuses `name` for the object `stmt` declares when an object of the other
/// kind (`other`: "source" or "view") already has it: sources and views share
/// one namespace, as tables and views do in a SQL catalog.
fn clash<'n>(
    stmt: &Stmt<'_>,
    name: &str,
    other: &str,
    names: impl IntoIterator<Item = &'n str>,
) -> Result<()> {
    match names.into_iter().find(|n| n.eq_ignore_ascii_case(name)) {
        None => Ok(()),
        Some(n) => Err(err(
            stmt,
            stmt.tokens[2].span.start,
            format!(
                "`{name}` is the name of {other} `{n}` already: sources and views share one namespace"
            ),
        )),
    }
}

/// Parse a DDL text (see the module).
pub fn parse(text: &str) -> Result<Pipeline> {
    // a byte order mark (as editors on Windows save UTF-8) is not the text's
    // first character: its positions are counted after it, as an editor shows them
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let tokens = Tokenizer::new(&GenericDialect {}, text)
        .with_unescape(true)
        .tokenize_with_location()
        .map_err(|e| Error::Ddl {
            statement: 0,
            line: e.location.line,
            column: e.location.column,
            message: e.message.clone(),
        })?;
    let offsets = Offsets::new(text);
    let mut stmts: Vec<Vec<TokenWithSpan>> = vec![Vec::new()];
    let mut depth = 0i64;
    for t in tokens {
        match &t.token {
            Token::Whitespace(_) => continue,
            Token::SemiColon if depth == 0 => {
                stmts.push(Vec::new());
                continue;
            }
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if let Some(s) = stmts.last_mut() {
            s.push(t);
        }
    }
    let mut p = Pipeline {
        sources: Vec::new(),
        views: Vec::new(),
        places: Vec::new(),
    };
    for (i, tokens) in stmts.into_iter().filter(|s| !s.is_empty()).enumerate() {
        let stmt = Stmt {
            number: i + 1,
            tokens,
            text,
            offsets: &offsets,
        };
        let mut c = Cursor { stmt: &stmt, at: 0 };
        c.expect_keyword("CREATE", "a statement starting with")?;
        // Flink's `CREATE TABLE` (with a watermark) declares a source, and
        // Materialize's and RisingWave's `CREATE MATERIALIZED VIEW` a view
        let materialized = c.keyword("MATERIALIZED");
        if !materialized && (c.keyword("SOURCE") || c.keyword("TABLE")) {
            let named_at = c.at;
            let name = c.name("the source's name")?;
            if p.sources
                .iter()
                .any(|(s, _)| s.name.eq_ignore_ascii_case(&name))
            {
                return Err(err(
                    &stmt,
                    stmt.tokens[named_at].span.start,
                    format!("source `{name}` is declared twice"),
                ));
            }
            clash(
                &stmt,
                &name,
                "view",
                p.views.iter().map(|v| v.name.as_str()),
            )?;
            let s = source(&mut c, name)?;
            p.sources.push(s);
        } else if c.keyword("VIEW") {
            let named_at = c.at;
            let name = c.name("the view's name")?;
            if p.views.iter().any(|v| v.name.eq_ignore_ascii_case(&name)) {
                return Err(err(
                    &stmt,
                    stmt.tokens[named_at].span.start,
                    format!("view `{name}` is declared twice"),
                ));
            }
            clash(
                &stmt,
                &name,
                "source",
                p.sources.iter().map(|(s, _)| s.name.as_str()),
            )?;
            let (v, at, query) = view(&mut c, name, &p.sources)?;
            p.views.push(v);
            p.places.push(Place {
                statement: stmt.number,
                head: stmt.head(),
                at,
                query,
            });
        } else {
            let found = c.describe();
            return c.fail(format!(
                "expected `SOURCE` (or Flink's `TABLE`) or `[MATERIALIZED] VIEW` after CREATE, found {found}"
            ));
        }
    }
    if p.views.is_empty() {
        return Err(Error::Ddl {
            statement: 0,
            line: 1,
            column: 1,
            message: "the text declares no view (CREATE VIEW name AS …)".into(),
        });
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Positions counted from a query starting at line 4, column 10: on its
    /// first line the columns shift, on later ones the lines; text that only
    /// looks like a position, and multi-byte text, pass unchanged.
    #[test]
    fn positions_in_a_query_are_counted_in_the_text() {
        let (m, first) = relocated(
            "a (line 1, column 5) ü (line 3, column 2) Line: 2, Column: 7 (line x, column 1) \
             (line 1, column) (line 1 (line 0, column 0) (line 18446744073709551615, column 1)",
            Location::new(4, 10),
        );
        assert_eq!(
            m,
            "a (line 4, column 14) ü (line 6, column 2) Line: 5, Column: 7 (line x, column 1) \
             (line 1, column) (line 1 (line 4, column 0) (line 18446744073709551615, column 1)"
        );
        assert_eq!(first, Some(Location::new(4, 14)));
        assert_eq!(
            relocated("none", Location::new(2, 2)),
            ("none".into(), None)
        );
    }
}
