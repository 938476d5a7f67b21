//! Source schemas written as SQL column definitions.

use arrow::datatypes::SchemaRef;

/// Parse a schema written as SQL column definitions:
/// `"auction BIGINT, price DOUBLE, ts TIMESTAMP, d DECIMAL(10,2)"`.
/// Types: BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT/REAL, VARCHAR/TEXT/STRING,
/// BOOLEAN, TIMESTAMP (milliseconds), DATE, DECIMAL(p,s). Columns are nullable.
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
    let ty = ty.trim().to_ascii_uppercase();
    Ok(match ty.as_str() {
        "BIGINT" | "INT8" | "INT64" | "LONG" => DataType::Int64,
        "INT" | "INTEGER" | "INT4" | "INT32" => DataType::Int32,
        "SMALLINT" | "INT2" => DataType::Int16,
        "TINYINT" => DataType::Int8,
        "DOUBLE" | "FLOAT8" | "FLOAT64" => DataType::Float64,
        "FLOAT" | "REAL" | "FLOAT4" => DataType::Float32,
        "VARCHAR" | "TEXT" | "STRING" | "UTF8" => DataType::Utf8,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "TIMESTAMP" => DataType::Timestamp(TimeUnit::Millisecond, None),
        "DATE" => DataType::Date32,
        t if t.starts_with("DECIMAL(") && t.ends_with(')') => {
            let inner = &t["DECIMAL(".len()..t.len() - 1];
            let (p, sc) = inner.split_once(',').unwrap_or((inner, "0"));
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
        other => return Err(format!("unknown type `{other}`")),
    })
}
