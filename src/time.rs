//! Event time: reading an Arrow column as milliseconds since the Unix epoch,
//! and writing window bounds back in the column's own type.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Date32Array, Date64Array, Int64Array, PrimitiveArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, TimeUnit};

/// Event time in milliseconds since the Unix epoch.
pub type EventTime = i64;

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// Whether `dt` can be an event-time column.
pub fn is_event_time_type(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
    ) || dt.is_integer()
}

/// The type window bounds take for an event-time column of type `dt`:
/// the same type for timestamps and dates, `Int64` for integers.
pub fn bound_type(dt: &DataType) -> DataType {
    match dt {
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => dt.clone(),
        _ => DataType::Int64,
    }
}

/// Reads an event-time column as milliseconds (NULL stays NULL). Sub-millisecond
/// timestamps are floored to the millisecond; an unsigned value above
/// `i64::MAX` becomes NULL (it is refused like a NULL event time).
pub fn to_millis(col: &dyn Array) -> Result<Int64Array, arrow::error::ArrowError> {
    fn map<T: arrow::datatypes::ArrowPrimitiveType>(
        a: &PrimitiveArray<T>,
        f: impl Fn(T::Native) -> i64,
    ) -> Int64Array {
        // over the values buffer (null slots map too, harmlessly), nulls kept
        a.unary::<_, Int64Type>(f)
    }
    /// Already milliseconds as `i64`: the same buffers, retyped.
    fn same<T: arrow::datatypes::ArrowPrimitiveType<Native = i64>>(
        a: &PrimitiveArray<T>,
    ) -> Int64Array {
        Int64Array::new(a.values().clone(), a.nulls().cloned())
    }
    let any = col.as_any();
    let out = match col.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => {
            map(downcast::<TimestampSecondArray>(any)?, |v| {
                v.saturating_mul(1000)
            })
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            same(downcast::<TimestampMillisecondArray>(any)?)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            map(downcast::<TimestampMicrosecondArray>(any)?, |v| {
                v.div_euclid(1000)
            })
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            map(downcast::<TimestampNanosecondArray>(any)?, |v| {
                v.div_euclid(1_000_000)
            })
        }
        DataType::Date32 => map(downcast::<Date32Array>(any)?, |d| d as i64 * DAY_MS),
        DataType::Date64 => same(downcast::<Date64Array>(any)?),
        DataType::UInt64 => {
            let a = downcast::<arrow::array::UInt64Array>(any)?;
            a.iter()
                .map(|v| v.and_then(|v| i64::try_from(v).ok()))
                .collect()
        }
        dt if dt.is_integer() => {
            let c = cast(col, &DataType::Int64)?;
            downcast::<PrimitiveArray<Int64Type>>(c.as_any())?.clone()
        }
        other => {
            return Err(arrow::error::ArrowError::InvalidArgumentError(format!(
                "{other} is not an event-time type (timestamp, date or integer milliseconds)"
            )))
        }
    };
    Ok(out)
}

fn downcast<T: 'static>(a: &dyn std::any::Any) -> Result<&T, arrow::error::ArrowError> {
    a.downcast_ref::<T>().ok_or_else(|| {
        arrow::error::ArrowError::InvalidArgumentError("unexpected array type".into())
    })
}

/// A column of `len` copies of the bound `ms`, in type `dt` (from [`bound_type`]).
pub fn bound_column(ms: EventTime, dt: &DataType, len: usize) -> ArrayRef {
    bound_array(&vec![ms; len], dt)
}

/// A column of window bounds (milliseconds) in type `dt` (from [`bound_type`]).
pub fn bound_array(ms: &[EventTime], dt: &DataType) -> ArrayRef {
    match dt {
        DataType::Timestamp(unit, tz) => {
            let conv = |v: i64| match unit {
                TimeUnit::Second => v.div_euclid(1000),
                TimeUnit::Millisecond => v,
                TimeUnit::Microsecond => v.saturating_mul(1000),
                TimeUnit::Nanosecond => v.saturating_mul(1_000_000),
            };
            let values: Vec<i64> = ms.iter().map(|v| conv(*v)).collect();
            match unit {
                TimeUnit::Second => {
                    Arc::new(TimestampSecondArray::from(values).with_timezone_opt(tz.clone()))
                }
                TimeUnit::Millisecond => {
                    Arc::new(TimestampMillisecondArray::from(values).with_timezone_opt(tz.clone()))
                }
                TimeUnit::Microsecond => {
                    Arc::new(TimestampMicrosecondArray::from(values).with_timezone_opt(tz.clone()))
                }
                TimeUnit::Nanosecond => {
                    Arc::new(TimestampNanosecondArray::from(values).with_timezone_opt(tz.clone()))
                }
            }
        }
        DataType::Date32 => Arc::new(Date32Array::from(
            ms.iter()
                .map(|v| v.div_euclid(DAY_MS) as i32)
                .collect::<Vec<_>>(),
        )),
        DataType::Date64 => Arc::new(Date64Array::from(ms.to_vec())),
        _ => Arc::new(Int64Array::from(ms.to_vec())),
    }
}

/// The last millisecond RFC 3339 writes with a four-digit year:
/// 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MS: EventTime = 253_402_300_799_999;

/// Human-readable form of an event time for reports and the CLI: RFC 3339
/// from the Unix epoch to the end of year 9999, milliseconds since the
/// epoch (`-5ms`, `253402300800000ms`) outside that range.
pub fn display(ms: Option<EventTime>) -> String {
    match ms {
        None => "-inf".into(),
        Some(i64::MAX) => "+inf".into(),
        Some(v @ 0..=LAST_RFC3339_MS) => {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(v as u64);
            // (humantime's formatter fails, rather than writes, a year past 9999)
            humantime::format_rfc3339_millis(t).to_string()
        }
        Some(v) => format!("{v}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    #[test]
    fn units_floor_to_milliseconds() {
        let ns = TimestampNanosecondArray::from(vec![Some(1_999_999), None, Some(-1)]);
        let ms = to_millis(&ns).expect("timestamp");
        assert_eq!(ms.iter().collect::<Vec<_>>(), vec![Some(1), None, Some(-1)]);
        let d = Date32Array::from(vec![1]);
        assert_eq!(to_millis(&d).expect("date").value(0), DAY_MS);
        let i = Int32Array::from(vec![7]);
        assert_eq!(to_millis(&i).expect("int").value(0), 7);
        let s = arrow::array::StringArray::from(vec!["x"]);
        assert!(to_millis(&s).is_err());
    }

    #[test]
    fn every_unit_keeps_nulls_and_limits() {
        let raw = vec![
            Some(i64::MIN),
            None,
            Some(-1),
            Some(0),
            Some(1_999),
            Some(i64::MAX),
        ];
        let got = |a: &dyn Array| to_millis(a).expect("a time").iter().collect::<Vec<_>>();
        // the rule each unit follows, value by value
        let want = |f: fn(i64) -> i64| raw.iter().map(|v| v.map(f)).collect::<Vec<_>>();
        assert_eq!(
            got(&TimestampSecondArray::from(raw.clone())),
            want(|v| v.saturating_mul(1000))
        );
        assert_eq!(got(&TimestampMillisecondArray::from(raw.clone())), raw);
        assert_eq!(
            got(&TimestampMicrosecondArray::from(raw.clone())),
            want(|v| v.div_euclid(1000))
        );
        assert_eq!(
            got(&TimestampNanosecondArray::from(raw.clone())),
            want(|v| v.div_euclid(1_000_000))
        );
        assert_eq!(got(&Date64Array::from(raw.clone())), raw);
        let days = vec![Some(i32::MIN), None, Some(-1), Some(i32::MAX)];
        assert_eq!(
            got(&Date32Array::from(days.clone())),
            days.iter()
                .map(|d| d.map(|d| i64::from(d) * DAY_MS))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_event_time_displays() {
        let shown = |v| display(Some(v));
        assert_eq!(display(None), "-inf");
        assert_eq!(shown(i64::MAX), "+inf");
        assert_eq!(shown(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(shown(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(shown(-1), "-1ms");
        assert_eq!(shown(i64::MIN), format!("{}ms", i64::MIN));
        assert_eq!(shown(LAST_RFC3339_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(shown(LAST_RFC3339_MS + 1), "253402300800000ms");
        assert_eq!(shown(i64::MAX - 1), format!("{}ms", i64::MAX - 1));
    }

    #[test]
    fn bounds_come_back_in_the_column_type() {
        let dt = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let a = bound_column(1500, &dt, 2);
        assert_eq!(a.data_type(), &dt);
        let back = to_millis(&a).expect("timestamp");
        assert_eq!(back.value(1), 1500);
    }
}
