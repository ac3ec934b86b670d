//! Calendar dates and RFC 3339 timestamps as seconds since the epoch (UTC), for `--since`
//! flags and the dates forges write (`2024-03-01T12:00:00.000Z`, `...+01:00`), through
//! `chrono`, so an impossible date (31 February) is refused.

use chrono::{DateTime, NaiveDate};

/// `2024-05-31` as the first second of that day, UTC (a clap value parser).
pub fn parse_day(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not a date like 2024-05-31");
    let parts: Vec<&str> = text.split('-').collect();
    let shaped = matches!(parts.as_slice(), [y, m, d] if y.len() == 4 && m.len() == 2 && d.len() == 2);
    if !shaped {
        return Err(bad());
    }
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| bad())?;
    Ok(date.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc().timestamp())
}

/// An RFC 3339 timestamp (`2024-03-01T12:00:00Z`, fractions and `+hh:mm` offsets allowed).
pub fn parse_timestamp(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.timestamp())
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_timestamp(unix: i64) -> String {
    match DateTime::from_timestamp(unix, 0) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => format!("@{unix}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_counted_from_the_epoch() {
        assert_eq!(parse_day("1970-01-01"), Ok(0));
        assert_eq!(parse_day("2024-03-01"), Ok(1_709_251_200));
        assert!(parse_day("2024-13-01").is_err());
        assert!(parse_day("2024-3-1x").is_err());
        assert!(parse_day("2024-02-31").is_err(), "31 February");
        assert!(parse_day("2023-02-29").is_err(), "not a leap year");
        assert_eq!(parse_day("2024-02-29"), Ok(1_709_164_800));
    }

    #[test]
    fn timestamps_take_fractions_and_offsets() {
        assert_eq!(parse_timestamp("2024-03-01T00:00:00Z"), Some(1_709_251_200));
        assert_eq!(parse_timestamp("2024-03-01T12:30:05.123Z"), Some(1_709_251_200 + 45_005));
        assert_eq!(parse_timestamp("2024-03-01T13:30:05.000+01:00"), Some(1_709_251_200 + 45_005));
        assert_eq!(parse_timestamp("2024-02-29T23:30:05-01:00"), Some(1_709_251_200 + 1805));
        assert_eq!(parse_timestamp("2024-03-01"), None);
        assert_eq!(parse_timestamp("2024-03-01T25:00:00Z"), None);
        assert_eq!(parse_timestamp("2024-02-31T00:00:00Z"), None);
    }

    #[test]
    fn dates_round_trip() {
        for unix in [0, 951_782_400, 1_709_251_200 + 45_005, 4_102_444_799] {
            assert_eq!(parse_timestamp(&format_timestamp(unix)), Some(unix));
        }
    }
}
