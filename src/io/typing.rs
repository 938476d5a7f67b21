//! Typing the columns an input reader read: each column is cast to its
//! declared or inferred type, and a cell that was there but does not convert
//! makes its row refused (with file, line, column, value and reason), never
//! silently NULL.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::{cast_with_options, filter_record_batch, CastOptions};
use arrow::datatypes::{DataType, SchemaRef};

use crate::window::EventTimeDomain;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::engine::InvalidRow;
use crate::error::{Error, Result};

/// A row of an input that was refused before it became part of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Its 1-based line (CSV, as an editor shows it) or row (Parquet).
    pub line: u64,
    /// Where it is in its file, in words: `line 57` (CSV, 1-based as an
    /// editor shows it) or `row 17` (Parquet, 1-based).
    pub place: String,
    /// The row as the engine keeps it (see [`crate::Engine::push_invalid`]).
    pub row: InvalidRow,
}

impl Refused {
    /// The refusal in words, naming place, column, value and reason:
    /// ``line 57: column `price`: "n/a" is not a valid Int64``.
    pub fn describe(&self) -> String {
        match &self.row.column {
            Some(c) => format!("{}: column `{c}`: {}", self.place, self.row.reason),
            None => format!("{}: {}", self.place, self.row.reason),
        }
    }
}

/// Where each row of a chunk comes from: its line (or row) number, its
/// place in words and its `file:line` location.
pub(crate) trait Locate {
    /// `(line, place, location)` of row `i` of the chunk.
    fn locate(&self, i: usize) -> (u64, String, String);
}

/// Casts `raw` (one array per field of `schema`, same order) to `schema`.
/// Returns the rows whose every cell converted, as a batch of `schema`
/// (`None` when no row did), and a refusal for every other row, in row
/// order. A NULL cell stays NULL; a cell that was not NULL and becomes NULL
/// is a bad cell. `event_time` is the index of the event-time column, read
/// for the refused rows when it converted; a row whose event time is empty
/// or outside `domain` is refused too.
pub(crate) fn type_columns(
    path: &std::path::Path,
    raw: &[ArrayRef],
    schema: &SchemaRef,
    event_time: usize,
    domain: &EventTimeDomain,
    at: &dyn Locate,
) -> Result<(Option<RecordBatch>, Vec<Refused>)> {
    let rows = raw.first().map(|a| a.len()).unwrap_or(0);
    let opts = CastOptions {
        safe: true,
        format_options: FormatOptions::default(),
    };
    let mut typed = Vec::with_capacity(raw.len());
    // row -> its first bad cell (column, value, reason) and how many more
    let mut bad: BTreeMap<usize, (usize, Option<String>, String, usize)> = BTreeMap::new();
    for (ci, (src, field)) in raw.iter().zip(schema.fields()).enumerate() {
        if src.data_type() == field.data_type() {
            typed.push(src.clone());
            continue;
        }
        let cannot = |why: String| Error::Input {
            path: path.to_path_buf(),
            message: format!(
                "column `{}` holds {} values, which cannot be read as {}: {why}",
                field.name(),
                type_name(src.data_type()),
                type_name(field.data_type())
            ),
        };
        if let Some(why) = meaningless_cast(src.data_type(), field.data_type()) {
            return Err(cannot(why));
        }
        let dst = match floored_timestamps(src.as_ref(), field.data_type()) {
            Some(d) => d,
            None => cast_with_options(src.as_ref(), field.data_type(), &opts),
        }
        .map_err(|e| cannot(e.to_string()))?;
        // a number written past the float's range (`1e400`, or a DOUBLE's
        // 1e300 as a FLOAT) casts to an infinity: refused as out of range,
        // as SQL databases do, not read as one (`inf` written as such is one)
        let overflowed = out_of_range(src.as_ref(), dst.as_ref());
        // 1.5 cast to an integer is 1: refused, as the text "1.5" is
        let fractions = fractions(src, dst.as_ref())?;
        if dst.null_count() > src.null_count() || !overflowed.is_empty() || !fractions.is_empty() {
            let fmt = ArrayFormatter::try_new(src.as_ref(), &FormatOptions::default())?;
            let cut = (0..rows).filter(|&r| src.is_valid(r) && dst.is_null(r));
            let mut faults: Vec<(usize, &str, &str)> = cut
                .map(|r| (r, "is not a valid", ""))
                .chain(overflowed.iter().map(|&r| (r, "is out of range for", "")))
                .chain(
                    fractions
                        .iter()
                        .map(|&r| (r, "is not a valid", " (it has a fraction)")),
                )
                .collect();
            faults.sort_unstable();
            for (r, what, tail) in faults {
                match bad.get_mut(&r) {
                    Some(e) => e.3 += 1,
                    None => {
                        let value = fmt.value(r).to_string();
                        let ty = type_name(field.data_type());
                        let reason = format!("{} {what} {ty}{tail}", quoted(&value));
                        bad.insert(r, (ci, Some(value), reason, 0));
                    }
                }
            }
        }
        typed.push(dst);
    }
    // an empty event time refuses its row here, where its line is known
    if let Some(t) = typed.get(event_time) {
        if t.null_count() > 0 {
            for r in (0..rows).filter(|&r| t.is_null(r)) {
                bad.entry(r).or_insert_with(|| {
                    (
                        event_time,
                        None,
                        "the event time is empty (NULL)".to_string(),
                        0,
                    )
                });
            }
        }
    }
    // and an empty cell of a column declared NOT NULL
    for (ci, (t, field)) in typed.iter().zip(schema.fields()).enumerate() {
        if field.is_nullable() || ci == event_time || t.null_count() == 0 {
            continue;
        }
        for r in (0..rows).filter(|&r| t.is_null(r)) {
            bad.entry(r).or_insert_with(|| {
                (
                    ci,
                    None,
                    format!(
                        "the cell is empty (NULL), but `{}` is declared NOT NULL",
                        field.name()
                    ),
                    0,
                )
            });
        }
    }
    // so does an event time no window of the views can place
    if let Some(Ok(t)) = typed
        .get(event_time)
        .map(|t| crate::time::to_millis(t.as_ref()))
    {
        for (r, ms) in t.iter().enumerate() {
            if let Some(ms) = ms.filter(|ms| !domain.holds(*ms)) {
                bad.entry(r).or_insert_with(|| {
                    (
                        event_time,
                        Some(ms.to_string()),
                        format!("event time {ms} ms: {}", EventTimeDomain::REASON),
                        0,
                    )
                });
            }
        }
    }
    if bad.is_empty() {
        let batch = RecordBatch::try_new(schema.clone(), typed)?;
        return Ok(((rows > 0).then_some(batch), Vec::new()));
    }
    // (NULLs of NOT NULL columns are among the refused rows: the schema
    // holds once they are filtered out)
    let loose = Arc::new(arrow::datatypes::Schema::new(
        (schema.fields().iter())
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(loose, typed)?;
    let times = crate::time::to_millis(batch.column(event_time).as_ref()).ok();
    let mut refused = Vec::with_capacity(bad.len());
    for (&r, (ci, value, reason, more)) in &bad {
        let field = schema.field(*ci);
        let (line, place, location) = at.locate(r);
        let mut reason = reason.clone();
        if *more > 0 {
            reason.push_str(&format!(
                " (and {more} more cell{} of this row do{} not parse)",
                if *more == 1 { "" } else { "s" },
                if *more == 1 { "es" } else { "" }
            ));
        }
        refused.push(Refused {
            line,
            place,
            row: InvalidRow {
                location: Some(location),
                column: Some(field.name().clone()),
                value: value.clone(),
                reason,
                event_time: times
                    .as_ref()
                    .and_then(|t| t.is_valid(r).then_some(t.value(r))),
            },
        });
    }
    let keep: BooleanArray = (0..rows).map(|r| Some(!bad.contains_key(&r))).collect();
    let good = filter_record_batch(&batch, &keep)?;
    let good = RecordBatch::try_new(schema.clone(), good.columns().to_vec())?;
    Ok(((good.num_rows() > 0).then_some(good), refused))
}

/// Why a column of type `from` is not read as `to` at all, where a cast
/// would change what its values mean: a time's count of its own unit
/// (days, microseconds, …) read as a number, or a number read as a count
/// of days. An integer read as a `TIMESTAMP` is milliseconds, as an
/// event-time integer is.
fn meaningless_cast(from: &DataType, to: &DataType) -> Option<String> {
    let time = |dt: &DataType| {
        matches!(
            dt,
            DataType::Timestamp(..)
                | DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Duration(_)
                | DataType::Interval(_)
        )
    };
    let number = |dt: &DataType| dt.is_numeric();
    if time(from) && number(to) {
        return Some(format!(
            "a cast would give each value's count of its unit ({from}), not milliseconds; declare the column {}",
            match from {
                DataType::Timestamp(..) => "TIMESTAMP",
                DataType::Date32 | DataType::Date64 => "DATE (or TIMESTAMP)",
                _ => "as the file holds it",
            }
        ));
    }
    if number(from) && to == &DataType::Date32 {
        return Some(
            "a number is not a date; declare the column TIMESTAMP (integers are milliseconds) or as the file holds it"
                .to_string(),
        );
    }
    None
}

/// A timestamp of a finer unit than `to`'s (microseconds as milliseconds)
/// floored to it, as event times are (`-1 µs` is `-1 ms`, before the
/// epoch): a cast truncates towards zero, which puts a time just before a
/// window's start into the window. `None` for other casts.
fn floored_timestamps(
    src: &dyn Array,
    to: &DataType,
) -> Option<std::result::Result<ArrayRef, arrow::error::ArrowError>> {
    use arrow::datatypes::TimeUnit;
    let (DataType::Timestamp(from, _), DataType::Timestamp(TimeUnit::Millisecond, _)) =
        (src.data_type(), to)
    else {
        return None;
    };
    if !matches!(from, TimeUnit::Microsecond | TimeUnit::Nanosecond) {
        return None;
    }
    Some(crate::time::to_millis(src).and_then(|ms| arrow::compute::cast(&ms, to)))
}

/// The rows where a float or decimal `src` cast to an integer `dst` lost a
/// fraction (`1.5` read as `1`).
fn fractions(src: &ArrayRef, dst: &dyn Array) -> Result<Vec<usize>> {
    let lossy = matches!(
        src.data_type(),
        DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
    );
    if !lossy || !dst.data_type().is_integer() {
        return Ok(Vec::new());
    }
    // (canonical: -0.0 read as 0 lost no fraction, and Arrow orders it below 0.0)
    let back = arrow::compute::cast(dst, src.data_type())?;
    let was = crate::paths::sql::checked::canonical_array(src);
    let differs = arrow::compute::kernels::cmp::distinct(&back, &was)?;
    Ok((0..src.len())
        .filter(|&r| dst.is_valid(r) && differs.value(r))
        .collect())
}

/// The rows where a text or a wider float `src` cast to a float `dst` gave
/// an infinity that the value does not hold (text that does not spell
/// `inf` or `-Infinity`, a finite `DOUBLE`): a number past the type's
/// range. None for other casts.
fn out_of_range(src: &dyn Array, dst: &dyn Array) -> Vec<usize> {
    use arrow::array::AsArray;
    use arrow::datatypes::Float64Type;
    // (a FLOAT's infinity stays one as a DOUBLE)
    let wide = |a: &dyn Array| match a.data_type() {
        DataType::Float64 | DataType::Float32 | DataType::Float16 => {
            arrow::compute::cast(a, &DataType::Float64).ok()
        }
        _ => None,
    };
    let Some(out) = wide(dst) else {
        return Vec::new();
    };
    let infinite = (out.as_primitive::<Float64Type>().iter().enumerate())
        .filter(|(_, v)| v.is_some_and(f64::is_infinite))
        .map(|(r, _)| r);
    if let Some(text) = src.as_string_opt::<i32>() {
        return infinite
            .filter(|&r| {
                let t = text.value(r).trim();
                let t = t.strip_prefix(['+', '-']).unwrap_or(t);
                !(t.eq_ignore_ascii_case("inf") || t.eq_ignore_ascii_case("infinity"))
            })
            .collect();
    }
    match wide(src) {
        Some(before) => {
            let before = before.as_primitive::<Float64Type>();
            infinite.filter(|&r| before.value(r).is_finite()).collect()
        }
        None => Vec::new(),
    }
}

/// The most characters of a cell a message quotes.
const QUOTED_CHARS: usize = 64;

/// A cell's text as a message quotes it (`"n/a"`): past [`QUOTED_CHARS`]
/// characters cut, with its length, so that a huge cell (a file's 30 MB
/// field) does not become a 30 MB message.
pub(crate) fn quoted(v: &str) -> String {
    match v.char_indices().nth(QUOTED_CHARS) {
        None => format!("{v:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &v[..cut], v.len()),
    }
}

/// A type as the messages name it: the SQL name a `schema = "…"` would use,
/// then Arrow's.
pub fn type_name(dt: &DataType) -> String {
    let sql = match dt {
        DataType::Int64 => "BIGINT",
        DataType::Int32 => "INT",
        DataType::Int16 => "SMALLINT",
        DataType::Int8 => "TINYINT",
        DataType::Float64 => "DOUBLE",
        DataType::Float32 => "FLOAT",
        DataType::Boolean => "BOOLEAN",
        DataType::Utf8 => "VARCHAR",
        DataType::Date32 => "DATE",
        DataType::Timestamp(_, _) => "TIMESTAMP",
        DataType::Decimal128(p, s) => return format!("DECIMAL({p},{s})"),
        other => return other.to_string(),
    };
    sql.to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    /// A short cell is quoted whole; a long one is cut after 64 characters
    /// (on a character, not a byte) and says how long it was.
    #[test]
    fn a_huge_cell_is_quoted_cut() {
        assert_eq!(quoted("n/a"), "\"n/a\"");
        let at_limit = "x".repeat(QUOTED_CHARS);
        assert_eq!(quoted(&at_limit), format!("{at_limit:?}"));
        let long = "ü".repeat(1_000);
        let q = quoted(&long);
        assert_eq!(q, format!("{:?}… (2000 bytes)", "ü".repeat(QUOTED_CHARS)));
    }

    struct Lines;
    impl Locate for Lines {
        fn locate(&self, i: usize) -> (u64, String, String) {
            let l = i as u64 + 2;
            (l, format!("line {l}"), format!("f.csv:{l}"))
        }
    }

    #[test]
    fn a_cell_that_does_not_parse_refuses_its_row_and_keeps_the_rest() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Int64, true),
            Field::new("ts", DataType::Int64, true),
        ]));
        let raw: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![
                Some("1"),
                Some("n/a"),
                None,
                Some("x"),
            ])),
            Arc::new(StringArray::from(vec![
                Some("10"),
                Some("20"),
                Some("30"),
                Some("y"),
            ])),
        ];
        let (good, refused) = type_columns(
            std::path::Path::new("f.csv"),
            &raw,
            &schema,
            1,
            &EventTimeDomain::default(),
            &Lines,
        )
        .expect("typed");
        let good = good.expect("rows");
        assert_eq!(
            good.num_rows(),
            2,
            "the NULL cell stays NULL, its row is kept"
        );
        let ts = good
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("i64");
        assert_eq!(ts.values().to_vec(), vec![10, 30]);
        assert_eq!(refused.len(), 2);
        assert_eq!(
            refused[0].describe(),
            "line 3: column `price`: \"n/a\" is not a valid BIGINT"
        );
        assert_eq!(refused[0].row.location.as_deref(), Some("f.csv:3"));
        assert_eq!(refused[0].row.event_time, Some(20));
        assert!(refused[1]
            .row
            .reason
            .contains("and 1 more cell of this row does not parse"));
        assert_eq!(refused[1].row.event_time, None);
    }
}
