//! The TOML form of a view spec (`[[source]]`, `[watermark]`, `[window]`).

use std::time::Duration;

use serde::Deserialize;

use super::{
    parse_schema, ExecMode, OutputMode, Retention, SourceSpec, ViewSpec, WatermarkSpec, WindowKind,
    WindowSpec,
};
use crate::error::{Error, Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    name: String,
    sql: String,
    #[serde(default)]
    output: OutputMode,
    #[serde(default)]
    mode: ExecMode,
    #[serde(rename = "source", default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    watermark: Option<RawWatermark>,
    #[serde(default)]
    window: Option<RawWindow>,
    #[serde(default)]
    table: Option<RawTable>,
}

/// `[table]`: how the view's table keeps closed windows.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    retention: Option<String>,
    retain_windows: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    event_time: String,
    schema: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatermark {
    allowed_lateness: Option<String>,
    idle_timeout: Option<String>,
    #[serde(default)]
    advance_when_idle: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    kind: String,
    size: Option<String>,
    slide: Option<String>,
    gap: Option<String>,
    offset: Option<String>,
    #[serde(default)]
    key: Vec<String>,
}

fn duration(view: &str, field: &str, text: &str) -> Result<Duration> {
    super::duration::parse(text).map_err(|b| {
        let why = match b {
            super::duration::Bad::Parse(e) => format!("is not a duration ({e})"),
            b => format!("is refused: {b}"),
        };
        Error::spec(
            view,
            format!("{field} = {text:?} {why}; write e.g. \"10s\", \"500ms\""),
        )
    })
}

fn required(view: &str, field: &str, v: &Option<String>) -> Result<Duration> {
    match v {
        Some(t) => duration(view, field, t),
        None => Err(Error::spec(view, format!("{field} is required"))),
    }
}

impl RawSpec {
    pub(super) fn into_spec(self) -> Result<ViewSpec> {
        let v = self.name.clone();
        let watermark = match &self.watermark {
            None => WatermarkSpec::default(),
            Some(w) => WatermarkSpec {
                allowed_lateness: match &w.allowed_lateness {
                    Some(t) => duration(&v, "watermark.allowed_lateness", t)?,
                    None => Duration::ZERO,
                },
                idle_timeout: match &w.idle_timeout {
                    Some(t) => duration(&v, "watermark.idle_timeout", t)?,
                    None => Duration::ZERO,
                },
                advance_when_idle: w.advance_when_idle,
            },
        };
        let window = match &self.window {
            None => None,
            Some(w) => {
                let kind = match w.kind.to_ascii_lowercase().as_str() {
                    "tumbling" => WindowKind::Tumbling {
                        size: required(&v, "window.size", &w.size)?,
                    },
                    "hopping" | "sliding" => WindowKind::Hopping {
                        size: required(&v, "window.size", &w.size)?,
                        slide: required(&v, "window.slide", &w.slide)?,
                    },
                    "session" => WindowKind::Session {
                        gap: required(&v, "window.gap", &w.gap)?,
                        key: w.key.clone(),
                    },
                    other => {
                        return Err(Error::spec(
                            &v,
                            format!(
                                "window.kind = {other:?}: expected \"tumbling\", \"hopping\" or \"session\""
                            ),
                        ))
                    }
                };
                let offset = match &w.offset {
                    Some(t) => duration(&v, "window.offset", t)?,
                    None => Duration::ZERO,
                };
                Some(WindowSpec { kind, offset })
            }
        };
        let retention = match &self.table {
            None => None,
            Some(t) => match (&t.retention, t.retain_windows) {
                (Some(_), Some(_)) => {
                    return Err(Error::spec(
                        &v,
                        "table.retention and table.retain_windows both given: keep one",
                    ))
                }
                (Some(d), None) => Some(Retention::EventTime(duration(&v, "table.retention", d)?)),
                (None, Some(n)) => Some(Retention::Windows(n)),
                (None, None) => None,
            },
        };
        let spec = ViewSpec {
            name: self.name,
            sql: self.sql,
            sources: self
                .sources
                .into_iter()
                .map(|s| {
                    let schema = match &s.schema {
                        Some(text) => Some(parse_schema(text).map_err(|m| {
                            Error::spec(&v, format!("source `{}` schema: {m}", s.name))
                        })?),
                        None => None,
                    };
                    Ok(SourceSpec {
                        name: s.name,
                        event_time: s.event_time,
                        schema,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
            watermark,
            window,
            output: self.output,
            mode: self.mode,
            retention,
        };
        spec.validate()?;
        Ok(spec)
    }
}
