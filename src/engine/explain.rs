//! `explain`: a view's spec, its plan and the path it takes, as text.

use std::fmt::Write;
use std::time::Duration;

use super::view::View;
use crate::spec::{ViewSpec, WindowKind};

/// The text [`super::Engine::explain`] returns.
pub(super) fn explain(v: &View) -> String {
    let s = &v.spec;
    let mut out = String::new();
    let _ = writeln!(out, "view: {}", s.name);
    match &v.written {
        Some(w) => {
            let _ = writeln!(out, "sql: {}", w.sql.trim());
            let _ = writeln!(out, "per window: {}", s.sql.trim());
        }
        None => {
            let _ = writeln!(out, "sql: {}", s.sql.trim());
        }
    }
    for src in &v.sources {
        let _ = writeln!(
            out,
            "source: {} (event time `{}` {})",
            src.name,
            src.schema.field(src.event_time).name(),
            src.schema.field(src.event_time).data_type()
        );
    }
    let _ = writeln!(
        out,
        "watermark: max event time - {} (idle timeout: {})",
        humantime::format_duration(s.watermark.allowed_lateness),
        if s.watermark.idle_timeout.is_zero() {
            "never".to_string()
        } else if s.watermark.advance_when_idle {
            format!(
                "{}; then W advances with processing time",
                humantime::format_duration(s.watermark.idle_timeout)
            )
        } else {
            humantime::format_duration(s.watermark.idle_timeout).to_string()
        }
    );
    let _ = writeln!(out, "window: {}", describe_window(s));
    let _ = writeln!(out, "output: {:?}", s.output);
    match v.plan.reason() {
        None => {
            let _ = writeln!(out, "path: {}", v.plan.path());
        }
        Some(reason) => {
            let _ = writeln!(out, "path: {} ({reason})", v.plan.path());
        }
    }
    let _ = writeln!(out, "plan: {}", v.plan);
    if let crate::plan::ViewPlan::Incremental(p) = &v.plan {
        if let Some(e) = &p.post_extremum {
            let _ = writeln!(out, "  post: {e}");
        }
    }
    let _ = writeln!(out, "logical plan:\n{}", v.logical.display_indent());
    out
}

fn describe_window(s: &ViewSpec) -> String {
    let f = |d: Duration| humantime::format_duration(d).to_string();
    match &s.window {
        None => "none (the view spans all rows)".into(),
        Some(w) => {
            let k = match &w.kind {
                WindowKind::Tumbling { size } => format!("tumbling {}", f(*size)),
                WindowKind::Hopping { size, slide } => {
                    format!("hopping {} every {}", f(*size), f(*slide))
                }
                WindowKind::Session { gap, key } => {
                    format!("session gap {} keyed by [{}]", f(*gap), key.join(", "))
                }
            };
            if w.offset.is_zero() {
                k
            } else {
                format!("{k}, offset {}", f(w.offset))
            }
        }
    }
}
