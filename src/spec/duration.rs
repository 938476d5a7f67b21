//! Durations as specs write them, in TOML (`size = "10s"`), DDL options
//! (`idle_timeout = '30s'`) and SQL intervals (`INTERVAL '10 seconds'`):
//! humantime's spans (`10s`, `1h 30min`, `1.5 seconds`), their units in any
//! letter case (`'10 SECONDS'`, as PostgreSQL reads it), and SQL's names of
//! the units below a second (`milliseconds`, `microseconds`, `nanoseconds`).
//!
//! Months and years are refused, however they are spelled: they have no
//! fixed length, and humantime's (30.44 and 365.25 days) would make windows
//! no calendar has. So is a bare `M`, which humantime reads as months and
//! PostgreSQL as minutes.

use std::fmt;
use std::time::Duration;

/// Why a text is not a fixed duration.
#[derive(Debug)]
pub(crate) enum Bad {
    /// A unit of no fixed length (as written).
    Unfixed(String),
    /// `M`: minutes to PostgreSQL, months to humantime.
    Ambiguous,
    /// Not a duration at all.
    Parse(humantime::DurationError),
}

impl fmt::Display for Bad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bad::Unfixed(u) => write!(
                f,
                "`{u}` is not a fixed duration (months and years vary in length): \
                 give days or smaller units"
            ),
            Bad::Ambiguous => write!(
                f,
                "`M` could be minutes or months: write `min` (months are not a fixed duration)"
            ),
            Bad::Parse(e) => write!(f, "not a duration ({e})"),
        }
    }
}

/// The duration `text` spells (see the module's doc).
pub(crate) fn parse(text: &str) -> Result<Duration, Bad> {
    let text = text.trim();
    let mut spelled = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let letters = |c: char| c.is_alphabetic();
        let run = match letters(c) {
            true => rest.find(|c: char| !letters(c)).unwrap_or(rest.len()),
            false => rest.find(letters).unwrap_or(rest.len()),
        };
        let (part, after) = rest.split_at(run);
        rest = after;
        if !letters(c) {
            spelled.push_str(part);
            continue;
        }
        if part == "M" {
            return Err(Bad::Ambiguous);
        }
        let unit = part.to_lowercase();
        spelled.push_str(match unit.as_str() {
            "month" | "months" | "mon" | "mons" | "year" | "years" | "yr" | "yrs" | "y" => {
                return Err(Bad::Unfixed(part.to_string()))
            }
            "millisecond" | "milliseconds" => "ms",
            "microsecond" | "microseconds" => "us",
            "nanosecond" | "nanoseconds" => "ns",
            _ => &unit,
        });
    }
    humantime::parse_duration(&spelled).map_err(Bad::Parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1;
    const MIN: u64 = 60 * S;
    const DAY: u64 = 24 * 60 * MIN;

    #[test]
    fn units_in_any_case_and_sql_names() {
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        for (text, want) in [
            ("10s", secs(10 * S)),
            ("10 SECONDS", secs(10 * S)),
            ("10 Seconds", secs(10 * S)),
            ("  2 DAYS ", secs(2 * DAY)),
            ("1h 30min", secs(90 * MIN)),
            ("1H 30MIN", secs(90 * MIN)),
            ("1m", secs(MIN)),
            ("1 week", secs(7 * DAY)),
            ("1.5 seconds", ms(1_500)),
            ("500 milliseconds", ms(500)),
            ("500 MILLISECONDS", ms(500)),
            ("1 millisecond", ms(1)),
            ("1500 microseconds", Duration::from_micros(1_500)),
            ("7 nanoseconds", Duration::from_nanos(7)),
            ("0s", Duration::ZERO),
        ] {
            match parse(text) {
                Ok(d) => assert_eq!(d, want, "{text:?}"),
                Err(e) => panic!("{text:?} refused: {e}"),
            }
        }
    }

    #[test]
    fn months_and_years_are_refused_however_spelled() {
        for text in [
            "1 month",
            "2 months",
            "1 MONTH",
            "1 Mon",
            "1mons",
            "1 year",
            "3 YEARS",
            "1y",
            "1yr",
            "2 yrs",
            "1d 1month",
            "1 month 1 day",
        ] {
            match parse(text) {
                Err(Bad::Unfixed(_)) => {}
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(matches!(parse("1M"), Err(Bad::Ambiguous)));
        assert!(matches!(parse("1d 2M"), Err(Bad::Ambiguous)));
    }

    #[test]
    fn what_is_no_duration_is_named() {
        for text in ["", "ten seconds", "-1s", "10", "1 fortnight", "1s!", "1 µ"] {
            match parse(text) {
                Err(Bad::Parse(_)) => {}
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
