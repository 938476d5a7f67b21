//! Source schemas written as SQL column definitions.

use arrow::datatypes::SchemaRef;

/// Parse a schema written as SQL column definitions:
/// `"auction BIGINT, price DOUBLE, ts TIMESTAMP, d DECIMAL(10,2)"`.
/// Types: BIGINT, INT, SMALLINT, TINYINT (each also `… UNSIGNED`, or DuckDB's
/// UBIGINT, UINTEGER, USMALLINT, UTINYINT), DOUBLE, FLOAT/REAL,
/// VARCHAR/TEXT/STRING, BOOLEAN, TIMESTAMP (milliseconds), DATE, DECIMAL(p,s).
/// Columns are nullable.
pub fn parse_schema(text: &str) -> std::result::Result<SchemaRef, String> {
    use arrow::datatypes::{Field, Schema};
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for ch in text.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    parts.push(cur);
    let mut fields = Vec::new();
    for part in parts {
        let part = part.trim();
        let Some((name, ty)) = part.split_once(char::is_whitespace) else {
            return Err(format!("`{part}`: expected `name TYPE`"));
        };
        let dt = parse_type(ty).map_err(|m| format!("`{name}`: {m}"))?;
        fields.push(Field::new(name.trim(), dt, true));
    }
    Ok(std::sync::Arc::new(Schema::new(fields)))
}

/// One column's type, as [`parse_schema`] reads it (`BIGINT`, `DECIMAL(10,2)`, …).
pub(crate) fn parse_type(ty: &str) -> std::result::Result<arrow::datatypes::DataType, String> {
    use arrow::datatypes::{DataType, TimeUnit};
    let written = ty.trim();
    // one space between words, none inside parentheses: `TIMESTAMP( 3 )` is `TIMESTAMP(3)`
    let ty = ty
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase()
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(" (", "(");
    // a timestamp's precision: digits of a second it keeps (Flink's
    // `TIMESTAMP(3)`); event times are milliseconds whatever it is
    let unit = |p: &str| -> std::result::Result<TimeUnit, String> {
        match p.trim().parse::<u8>() {
            Ok(0) => Ok(TimeUnit::Second),
            Ok(1..=3) => Ok(TimeUnit::Millisecond),
            Ok(4..=6) => Ok(TimeUnit::Microsecond),
            Ok(7..=9) => Ok(TimeUnit::Nanosecond),
            _ => Err(format!("`{ty}`: a timestamp's precision is 0 to 9 digits")),
        }
    };
    let zoned = |u: TimeUnit| DataType::Timestamp(u, Some("+00:00".into()));
    // `NAME(args) rest`: a length, a precision, or a precision and a scale
    if let Some((name, (args, rest))) = ty
        .split_once('(')
        .and_then(|(n, r)| Some((n, r.split_once(')')?)))
    {
        return Ok(match (name, rest.trim()) {
            // a length is not checked: text is text
            ("VARCHAR" | "CHAR" | "CHARACTER" | "CHARACTER VARYING", "")
                if args.trim().parse::<u32>().is_ok() =>
            {
                DataType::Utf8
            }
            ("TIMESTAMP", "" | "WITHOUT TIME ZONE") => DataType::Timestamp(unit(args)?, None),
            ("TIMESTAMP", "WITH TIME ZONE" | "WITH LOCAL TIME ZONE") | ("TIMESTAMP_LTZ", "") => {
                zoned(unit(args)?)
            }
            ("DECIMAL" | "NUMERIC", "") => {
                let (p, sc) = args.split_once(',').unwrap_or((args, "0"));
                let p: u8 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{ty}`: bad precision"))?;
                let sc: i8 = sc
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{ty}`: bad scale"))?;
                if p == 0 || p > 38 || sc < 0 || sc as u8 > p {
                    return Err(format!(
                        "`{ty}`: DECIMAL(p,s) needs 1 <= p <= 38 and 0 <= s <= p"
                    ));
                }
                DataType::Decimal128(p, sc)
            }
            _ => return Err(format!("unknown type `{written}`")),
        });
    }
    Ok(match ty.as_str() {
        "BIGINT" | "INT8" | "INT64" | "LONG" => DataType::Int64,
        "INT" | "INTEGER" | "INT4" | "INT32" => DataType::Int32,
        "SMALLINT" | "INT2" => DataType::Int16,
        "TINYINT" => DataType::Int8,
        // unsigned, as MySQL and DuckDB write them
        "BIGINT UNSIGNED" | "UBIGINT" | "UINT64" => DataType::UInt64,
        "INT UNSIGNED" | "INTEGER UNSIGNED" | "UINTEGER" | "UINT32" => DataType::UInt32,
        "SMALLINT UNSIGNED" | "USMALLINT" | "UINT16" => DataType::UInt16,
        "TINYINT UNSIGNED" | "UTINYINT" | "UINT8" => DataType::UInt8,
        "DOUBLE" | "DOUBLE PRECISION" | "FLOAT8" | "FLOAT64" => DataType::Float64,
        "FLOAT" | "REAL" | "FLOAT4" => DataType::Float32,
        "VARCHAR" | "TEXT" | "STRING" | "UTF8" | "CHARACTER VARYING" => DataType::Utf8,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "TIMESTAMP" | "TIMESTAMP WITHOUT TIME ZONE" | "DATETIME" => {
            DataType::Timestamp(TimeUnit::Millisecond, None)
        }
        "TIMESTAMPTZ"
        | "TIMESTAMP_LTZ"
        | "TIMESTAMP WITH TIME ZONE"
        | "TIMESTAMP WITH LOCAL TIME ZONE" => zoned(TimeUnit::Millisecond),
        "DATE" => DataType::Date32,
        "DECIMAL" | "NUMERIC" => {
            return Err(format!(
                "`{ty}` needs its precision and scale: DECIMAL(p, s), e.g. DECIMAL(18, 2)"
            ))
        }
        _ => return Err(format!("unknown type `{written}`")),
    })
}
