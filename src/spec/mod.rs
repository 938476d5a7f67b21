//! View specs: what a user declares — SQL, sources, watermark, window, output mode.
//!
//! A [`ViewSpec`] is built in Rust ([`ViewSpec::builder`]) or read from TOML
//! ([`ViewSpec::from_toml`]). Checks that need no schema happen here;
//! [`crate::Engine::create_view`] checks the rest (columns, types, SQL).

use std::path::Path;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a view emits at each trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutputMode {
    /// Each closed window's rows exactly once, final.
    #[default]
    Append,
    /// The rows whose value changed since the last trigger, open windows too,
    /// with a boolean `final` column.
    Update,
    /// The whole current view at every trigger.
    Complete,
}

/// Which path runs the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// The incremental path when the query's shape allows it, recompute otherwise.
    #[default]
    Auto,
    /// Always the DataFusion recompute path (to compare the two paths).
    Recompute,
}

/// The kind of event-time window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WindowKind {
    /// Fixed, non-overlapping windows `[k·size, (k+1)·size)`.
    Tumbling {
        /// Window length.
        size: Duration,
    },
    /// Overlapping windows `[s, s+size)` for every `s` that is a multiple of `slide`.
    Hopping {
        /// Window length.
        size: Duration,
        /// Distance between window starts (at most `size`).
        slide: Duration,
    },
    /// Per-key sessions: rows of one key closer than `gap` merge; a session
    /// `[first, last + gap)` closes when the watermark reaches its end.
    Session {
        /// Inactivity gap.
        gap: Duration,
        /// The source columns that form the session key (empty = one global session stream).
        key: Vec<String>,
    },
}

/// An event-time window: its kind and an offset that shifts its alignment
/// away from the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSpec {
    /// Tumbling, hopping or session.
    pub kind: WindowKind,
    /// Shift of the window grid (tumbling and hopping); zero by default.
    pub offset: Duration,
}

impl WindowSpec {
    /// Tumbling windows of `size`.
    pub fn tumbling(size: Duration) -> Self {
        WindowSpec {
            kind: WindowKind::Tumbling { size },
            offset: Duration::ZERO,
        }
    }
    /// Hopping windows of `size` every `slide`.
    pub fn hopping(size: Duration, slide: Duration) -> Self {
        WindowSpec {
            kind: WindowKind::Hopping { size, slide },
            offset: Duration::ZERO,
        }
    }
    /// Session windows with inactivity `gap`, keyed by the given source columns.
    pub fn session(gap: Duration, key: &[&str]) -> Self {
        WindowSpec {
            kind: WindowKind::Session {
                gap,
                key: key.iter().map(|k| k.to_string()).collect(),
            },
            offset: Duration::ZERO,
        }
    }
    /// The same windows shifted by `offset`.
    pub fn with_offset(mut self, offset: Duration) -> Self {
        self.offset = offset;
        self
    }
}

/// How long a view's table ([`crate::Engine::query`], [`crate::Engine::lookup`])
/// keeps a closed window's final rows; open windows are always held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Retention {
    /// The closed windows that ended within this much event time of the
    /// watermark (at the end of the stream, of the newest window's end).
    EventTime(Duration),
    /// The `n` closed windows that ended last.
    Windows(usize),
}

impl Retention {
    /// The default for `window`: one window's length in event time (the
    /// size of a tumbling or hopping window, a session's gap); a view
    /// without a window is one table that nothing closes.
    pub fn default_for(window: Option<&WindowSpec>) -> Self {
        Retention::EventTime(match window.map(|w| &w.kind) {
            Some(WindowKind::Tumbling { size }) | Some(WindowKind::Hopping { size, .. }) => *size,
            Some(WindowKind::Session { gap, .. }) => *gap,
            None => Duration::ZERO,
        })
    }
}

/// Watermark parameters of a view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct WatermarkSpec {
    /// How far behind the maximum event time the watermark trails.
    pub allowed_lateness: Duration,
    /// Processing time after which a silent source stops holding the
    /// watermark back; zero means never idle.
    pub idle_timeout: Duration,
    /// The clock-assisted watermark (opt-in; needs an idle timeout): once
    /// every source of the view has been idle for `idle_timeout`, W advances
    /// with processing time, so the last windows of a stream that went quiet
    /// close. Rows that arrive behind the W it reached are late.
    #[serde(default)]
    pub advance_when_idle: bool,
}

/// One input stream of a view: a table name in the SQL and its event-time column.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSpec {
    /// The table name the SQL uses and [`crate::Engine::push`] takes.
    pub name: String,
    /// The event-time column: `Timestamp(*)`, `Date32/64` or an integer of milliseconds.
    pub event_time: String,
    /// The Arrow schema of the batches; required by `create_view` (the CLI
    /// infers it from the input file).
    pub schema: Option<SchemaRef>,
}

impl SourceSpec {
    /// A source with its event-time column and schema.
    pub fn new(name: &str, event_time: &str, schema: SchemaRef) -> Self {
        SourceSpec {
            name: name.to_string(),
            event_time: event_time.to_string(),
            schema: Some(schema),
        }
    }
}

/// A view: a SQL query over event streams, an event-time window, a
/// watermark and an output mode.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewSpec {
    /// The view's name (unique within an engine).
    pub name: String,
    /// The query, evaluated per window over that window's non-late rows.
    pub sql: String,
    /// The sources the SQL reads.
    pub sources: Vec<SourceSpec>,
    /// Watermark parameters.
    pub watermark: WatermarkSpec,
    /// The window; `None` for a view over all rows (Update or Complete only).
    pub window: Option<WindowSpec>,
    /// What each trigger emits.
    pub output: OutputMode,
    /// Which path runs the view.
    pub mode: ExecMode,
    /// How long its table keeps closed windows; `None`: [`Retention::default_for`] its window.
    pub retention: Option<Retention>,
}

/// Builder for [`ViewSpec`].
#[derive(Clone, Debug)]
pub struct ViewSpecBuilder {
    spec: ViewSpec,
}

impl ViewSpec {
    /// Start a view with its name and SQL.
    pub fn builder(name: &str, sql: &str) -> ViewSpecBuilder {
        ViewSpecBuilder {
            spec: ViewSpec {
                name: name.to_string(),
                sql: sql.to_string(),
                sources: Vec::new(),
                watermark: WatermarkSpec::default(),
                window: None,
                output: OutputMode::Append,
                mode: ExecMode::Auto,
                retention: None,
            },
        }
    }

    /// Read a view spec from TOML text (see the README for the format).
    /// Sources read from TOML have no schema yet: set it before `create_view`.
    pub fn from_toml(text: &str) -> Result<Self> {
        let raw: RawSpec = ::toml::from_str(text).map_err(|e| Error::SpecFile {
            path: "<toml>".into(),
            message: e.to_string(),
        })?;
        raw.into_spec()
    }

    /// Read a view spec from a TOML file.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::SpecFile {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let raw: RawSpec = ::toml::from_str(&text).map_err(|e| Error::SpecFile {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        raw.into_spec()
    }

    /// Checks that need no schema: names, durations, window parameters.
    pub fn validate(&self) -> Result<()> {
        let v = &self.name;
        if v.trim().is_empty() {
            return Err(Error::spec(v, "the view needs a name"));
        }
        if self.sql.trim().is_empty() {
            return Err(Error::spec(v, "the view needs SQL"));
        }
        if self.sources.is_empty() {
            return Err(Error::spec(v, "the view needs at least one source"));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.sources {
            if s.name.trim().is_empty() || s.event_time.trim().is_empty() {
                return Err(Error::spec(
                    v,
                    "a source needs a name and an event_time column",
                ));
            }
            if !seen.insert(s.name.to_ascii_lowercase()) {
                return Err(Error::spec(
                    v,
                    format!("source `{}` is declared twice", s.name),
                ));
            }
        }
        check_ms(
            v,
            "watermark.allowed_lateness",
            self.watermark.allowed_lateness,
            true,
        )?;
        check_ms(
            v,
            "watermark.idle_timeout",
            self.watermark.idle_timeout,
            true,
        )?;
        if self.watermark.advance_when_idle && self.watermark.idle_timeout.is_zero() {
            return Err(Error::spec(
                v,
                "watermark.advance_when_idle needs watermark.idle_timeout above zero: \
                 W advances with processing time once every source has been idle that long",
            ));
        }
        if let Some(w) = &self.window {
            check_ms(v, "window.offset", w.offset, true)?;
            match &w.kind {
                WindowKind::Tumbling { size } => check_ms(v, "window.size", *size, false)?,
                WindowKind::Hopping { size, slide } => {
                    check_ms(v, "window.size", *size, false)?;
                    check_ms(v, "window.slide", *slide, false)?;
                    if slide > size {
                        return Err(Error::spec(
                            v,
                            format!(
                                "window.slide ({}) must not exceed window.size ({})",
                                humantime::format_duration(*slide),
                                humantime::format_duration(*size)
                            ),
                        ));
                    }
                    let n = windows_per_row(*size, *slide);
                    if n > MAX_WINDOWS_PER_ROW {
                        return Err(Error::spec(
                            v,
                            format!(
                                "window.size ({}) every window.slide ({}) puts each row in up \
                                 to {n} windows; at most {MAX_WINDOWS_PER_ROW} are allowed: \
                                 a longer slide or a shorter size",
                                humantime::format_duration(*size),
                                humantime::format_duration(*slide)
                            ),
                        ));
                    }
                }
                WindowKind::Session { gap, .. } => {
                    check_ms(v, "window.gap", *gap, false)?;
                    if self.sources.len() != 1 {
                        return Err(Error::spec(v, "session windows need exactly one source"));
                    }
                }
            }
        }
        // (a window the SQL declares is the spec's once lowered)
        if self.window.is_none()
            && self.output == OutputMode::Append
            && window_sql::lower(self)?.is_none()
        {
            // a query that does not parse says so first: the window it
            // declares may be what could not be read
            if let Err(e) = datafusion::sql::parser::DFParser::parse_sql(&self.sql) {
                return Err(Error::Sql {
                    view: v.clone(),
                    sql: self.sql.clone(),
                    source: Box::new(e),
                });
            }
            return Err(Error::Unsupported {
                view: v.clone(),
                message: "output mode `append` needs a window: without one no result is ever \
                          final; use `update` or `complete`, or declare a [window]"
                    .into(),
            });
        }
        Ok(())
    }
}

/// Durations are whole milliseconds, at most i64::MAX ms; zero only where allowed.
fn check_ms(view: &str, field: &str, d: Duration, zero_ok: bool) -> Result<()> {
    if d.is_zero() {
        return if zero_ok {
            Ok(())
        } else {
            Err(Error::spec(
                view,
                format!("{field} must be greater than zero"),
            ))
        };
    }
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(Error::spec(
            view,
            format!("{field} must be a whole number of milliseconds"),
        ));
    }
    if let Some(m) = too_large(d) {
        return Err(Error::spec(view, format!("{field} {m}")));
    }
    Ok(())
}

/// The longest duration a spec takes, in milliseconds: a quarter of
/// `i64::MAX` (about 73 million years), so that event times plus or minus
/// a window, a slide and a delay stay within `i64`.
pub(crate) const MAX_MS: u128 = (i64::MAX / 4) as u128;

/// What is wrong with `d` if it is longer than [`MAX_MS`].
pub(crate) fn too_large(d: Duration) -> Option<String> {
    (d.as_millis() > MAX_MS)
        .then(|| format!("is too large (at most {MAX_MS} ms, about 73 million years)"))
}

/// The most hopping windows one row may be in (`size / slide`, rounded
/// up). Each of them is a result of its own, so a row past it adds more than
/// a million rows to the output: at 1 ms every 100 days, 8.64 · 10⁹ windows a
/// row, no evaluation could hold them.
pub(crate) const MAX_WINDOWS_PER_ROW: u128 = 1_000_000;

/// How many windows of `size` every `slide` one row is in, at most (a row is
/// in ⌊size / slide⌋ or ⌈size / slide⌉ of them).
pub(crate) fn windows_per_row(size: Duration, slide: Duration) -> u128 {
    size.as_millis().div_ceil(slide.as_millis().max(1))
}

/// Milliseconds of a validated duration.
pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

impl ViewSpecBuilder {
    /// Add a source with its event-time column and schema.
    pub fn source(mut self, name: &str, event_time: &str, schema: SchemaRef) -> Self {
        self.spec
            .sources
            .push(SourceSpec::new(name, event_time, schema));
        self
    }
    /// Set the window.
    pub fn window(mut self, window: WindowSpec) -> Self {
        self.spec.window = Some(window);
        self
    }
    /// Set the allowed lateness (default zero).
    pub fn allowed_lateness(mut self, d: Duration) -> Self {
        self.spec.watermark.allowed_lateness = d;
        self
    }
    /// Set the idle timeout (default zero: never idle).
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.spec.watermark.idle_timeout = d;
        self
    }
    /// Let W advance with processing time once every source has been idle
    /// for the idle timeout (default off; see [`WatermarkSpec::advance_when_idle`]).
    pub fn advance_when_idle(mut self, on: bool) -> Self {
        self.spec.watermark.advance_when_idle = on;
        self
    }
    /// Set the output mode (default Append).
    pub fn output(mut self, mode: OutputMode) -> Self {
        self.spec.output = mode;
        self
    }
    /// How long the view's table keeps closed windows (see [`Retention`]).
    pub fn retention(mut self, retention: Retention) -> Self {
        self.spec.retention = Some(retention);
        self
    }
    /// Set the execution mode (default Auto).
    pub fn mode(mut self, mode: ExecMode) -> Self {
        self.spec.mode = mode;
        self
    }
    /// Finish; checks what needs no schema.
    pub fn build(self) -> Result<ViewSpec> {
        self.spec.validate()?;
        Ok(self.spec)
    }
}

pub mod ddl;
mod duration;
pub(crate) mod nesting;
mod schema;
mod toml_form;
pub(crate) mod window_sql;

pub use schema::parse_schema;
use toml_form::RawSpec;

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
name = "bids_per_auction"
sql = "SELECT auction, COUNT(*) AS bids FROM bids GROUP BY auction"
output = "append"
[[source]]
name = "bids"
event_time = "ts"
[watermark]
allowed_lateness = "2s"
idle_timeout = "0s"
[window]
kind = "hopping"
size = "10s"
slide = "5s"
"#;

    #[test]
    fn toml_round_trips_into_the_builder_form() {
        let spec = ViewSpec::from_toml(SPEC).expect("valid spec");
        assert_eq!(spec.name, "bids_per_auction");
        assert_eq!(spec.sources[0].event_time, "ts");
        assert_eq!(spec.watermark.allowed_lateness, Duration::from_secs(2));
        assert_eq!(
            spec.window,
            Some(WindowSpec::hopping(
                Duration::from_secs(10),
                Duration::from_secs(5)
            ))
        );
    }

    #[test]
    fn bad_durations_and_windows_are_named() {
        let zero = SPEC.replace("size = \"10s\"", "size = \"0s\"");
        let e = ViewSpec::from_toml(&zero)
            .expect_err("must be refused")
            .to_string();
        assert!(e.contains("window.size must be greater than zero"), "{e}");
        let neg = SPEC.replace("\"2s\"", "\"-2s\"");
        let e = ViewSpec::from_toml(&neg)
            .expect_err("must be refused")
            .to_string();
        assert!(e.contains("watermark.allowed_lateness"), "{e}");
        let wide = SPEC.replace("slide = \"5s\"", "slide = \"20s\"");
        let e = ViewSpec::from_toml(&wide)
            .expect_err("must be refused")
            .to_string();
        assert!(e.contains("must not exceed"), "{e}");
        let kind = SPEC.replace("\"hopping\"", "\"rolling\"");
        let e = ViewSpec::from_toml(&kind)
            .expect_err("must be refused")
            .to_string();
        assert!(e.contains("rolling"), "{e}");
        let unknown = format!("{SPEC}\nbogus = 1\n");
        assert!(ViewSpec::from_toml(&unknown).is_err());
    }

    #[test]
    fn schemas_in_toml() {
        let s = parse_schema("a BIGINT, d DECIMAL(10, 2), ts timestamp").expect("schema");
        assert_eq!(s.fields().len(), 3);
        assert_eq!(
            s.field(1).data_type(),
            &arrow::datatypes::DataType::Decimal128(10, 2)
        );
        let e = parse_schema("a BIGNUM").expect_err("must be refused");
        assert!(e.contains("BIGNUM"), "{e}");
    }

    #[test]
    fn append_without_a_window_is_refused() {
        let text = SPEC.split("[window]").next().unwrap_or_default();
        let e = ViewSpec::from_toml(text)
            .expect_err("must be refused")
            .to_string();
        assert!(e.contains("append") && e.contains("window"), "{e}");
    }
}
