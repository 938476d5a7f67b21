//! Input checks: a view's sources resolved against their schemas at
//! `create_view`, and every pushed batch conformed to its source's schema.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::view::View;
use crate::error::{Error, Result};
use crate::paths::SourceInfo;
use crate::spec::{ViewSpec, WindowKind, WindowSpec};
use crate::time::is_event_time_type;

/// The spec's sources with their schemas and event-time columns, checked:
/// a schema is given, the event-time column exists and has an event-time
/// type, and a source other views read has the same schema there.
///
/// `declared`: the window call of the view's SQL, as written and where, to
/// name in place of the spec's fields it was lowered to.
pub(super) fn resolve_sources(
    spec: &ViewSpec,
    views: &[View],
    declared: Option<&str>,
) -> Result<Vec<SourceInfo>> {
    let name = &spec.name;
    let mut sources = Vec::new();
    for s in &spec.sources {
        let schema = s.schema.as_ref().map(plain_schema).ok_or_else(|| {
            Error::spec(
                name,
                format!(
                    "source `{}` has no schema (give one, or let the CLI infer it from the input)",
                    s.name
                ),
            )
        })?;
        let idx = schema.index_of(&s.event_time).map_err(|_| {
            Error::spec(
                name,
                format!(
                    "event-time column `{}` is not in source `{}` (columns: {})",
                    s.event_time,
                    s.name,
                    names(&schema)
                ),
            )
        })?;
        let dt = schema.field(idx).data_type();
        if !is_event_time_type(dt) {
            return Err(Error::spec(
                name,
                format!(
                    "event-time column `{}` of source `{}` has type {dt}; it must be a timestamp, a date or an integer of milliseconds",
                    s.event_time, s.name
                ),
            ));
        }
        for v in views {
            if let Some(o) = v.sources.iter().find(|o| o.name == s.name) {
                if o.schema.fields() != schema.fields() {
                    return Err(Error::spec(
                        name,
                        format!(
                            "source `{}` is declared by view `{}` with another schema",
                            s.name, v.spec.name
                        ),
                    ));
                }
            }
        }
        sources.push(SourceInfo {
            name: s.name.clone(),
            schema,
            event_time: idx,
        });
    }
    if let (Some(w), Some(first)) = (&spec.window, sources.first()) {
        check_window_units(spec, w, first, declared)?;
    }
    Ok(sources)
}

/// Window bounds are of the event-time column's type: of a date column they
/// are dates, of a `TIMESTAMP(0)` column whole seconds. A window size, slide,
/// offset or session gap that is not a whole number of those units would
/// give distinct windows with the same printed bounds (and a `window_time`
/// that is not the window's last instant).
fn check_window_units(
    spec: &ViewSpec,
    w: &WindowSpec,
    src: &SourceInfo,
    declared: Option<&str>,
) -> Result<()> {
    use arrow::datatypes::TimeUnit;
    let dt = src.schema.field(src.event_time).data_type();
    let (unit, units, finer) = match dt {
        DataType::Date32 | DataType::Date64 => {
            (Duration::from_secs(86_400), "days", "a timestamp column")
        }
        DataType::Timestamp(TimeUnit::Second, _) => (
            Duration::from_secs(1),
            "seconds",
            "a timestamp of milliseconds (`TIMESTAMP(3)`)",
        ),
        _ => return Ok(()),
    };
    let durations: Vec<(&str, Duration)> = match &w.kind {
        WindowKind::Tumbling { size } => vec![("size", *size)],
        WindowKind::Hopping { size, slide } => vec![("size", *size), ("slide", *slide)],
        WindowKind::Session { gap, .. } => vec![("gap", *gap)],
    };
    for (field, d) in durations.into_iter().chain([("offset", w.offset)]) {
        if d.as_millis() % unit.as_millis() != 0 {
            // the window as the user wrote it: the call in the SQL, or the spec's field
            let what = match declared {
                Some(call) => format!("{call}: its {field}, {},", humantime::format_duration(d)),
                None => format!("window.{field} = {}", humantime::format_duration(d)),
            };
            return Err(Error::spec(
                &spec.name,
                format!(
                    "{what} is not a whole number of {units}, but the event-time column `{}` of source `{}` is a {dt}: use whole {units}, or {finer}",
                    src.schema.field(src.event_time).name(),
                    src.name
                ),
            ));
        }
    }
    Ok(())
}

/// A column's type with dictionary encoding taken off (`Dictionary(Int32,
/// Utf8)` is `Utf8`): an encoding, as Parquet writers choose it for
/// repetitive strings, not a type of its own; both paths see the values.
pub(crate) fn plain_type(dt: &DataType) -> &DataType {
    match dt {
        DataType::Dictionary(_, v) => plain_type(v),
        dt => dt,
    }
}

/// `schema` with every dictionary-encoded column read as its values
/// ([`plain_type`]).
fn plain_schema(schema: &SchemaRef) -> SchemaRef {
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Dictionary(..)))
    {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            f.as_ref()
                .clone()
                .with_data_type(plain_type(f.data_type()).clone())
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Check a batch against a source schema (names and types) and give it that
/// schema; non-nullable columns must hold no NULLs. A dictionary-encoded
/// column is decoded ([`plain_type`]). Floats come out canonical
/// (`-0.0` as `0.0`, every NaN as the one positive NaN).
pub(crate) fn conform(source: &str, schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    let err = |message: String| Error::SchemaMismatch {
        source_name: source.to_string(),
        message,
    };
    let got = batch.schema();
    if got.fields().len() != schema.fields().len() {
        return Err(err(format!(
            "expected {} columns ({}), got {} ({})",
            schema.fields().len(),
            names(schema),
            got.fields().len(),
            names(&got)
        )));
    }
    for (i, (want, have)) in schema.fields().iter().zip(got.fields().iter()).enumerate() {
        if want.name() != have.name() {
            return Err(err(format!(
                "column {i}: expected `{}`, got `{}`",
                want.name(),
                have.name()
            )));
        }
        if want.data_type() != plain_type(have.data_type()) {
            return Err(err(format!(
                "column `{}`: expected type {}, got {}",
                want.name(),
                want.data_type(),
                have.data_type()
            )));
        }
        if !want.is_nullable() && batch.column(i).null_count() > 0 {
            let row = (0..batch.num_rows())
                .find(|r| batch.column(i).is_null(*r))
                .unwrap_or(0);
            return Err(err(format!(
                "column `{}` is not nullable but row {row} is NULL",
                want.name()
            )));
        }
    }
    // one rule for floats on both paths: -0.0 is 0.0, every NaN the one NaN
    let columns = (batch.columns().iter().zip(schema.fields()))
        .map(|(c, want)| match c.data_type() == want.data_type() {
            true => Ok(c.clone()),
            false => arrow::compute::cast(c, want.data_type()).map_err(|e| err(e.to_string())),
        })
        .map(|c| c.map(|c| crate::paths::sql::checked::canonical_array(&c)))
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| err(e.to_string()))
}

fn names(s: &Schema) -> String {
    s.fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
