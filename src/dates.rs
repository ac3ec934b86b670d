//! Calendar dates and RFC 3339 timestamps as seconds since the epoch (UTC), for `--since`
//! flags and the dates forges write (`2024-03-01T12:00:00.000Z`, `...+01:00`). Small enough
//! that a date crate is not worth its weight.

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn ymd(text: &str) -> Option<(i64, i64, i64)> {
    let mut parts = text.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then_some((y, m, d))
}

/// `2024-05-31` as the first second of that day, UTC.
pub fn parse_day(text: &str) -> Result<i64, String> {
    ymd(text)
        .map(|(y, m, d)| days_from_civil(y, m, d) * 86_400)
        .ok_or_else(|| format!("`{text}` is not a date like 2024-05-31"))
}

/// An RFC 3339 timestamp (`2024-03-01T12:00:00Z`, fractions and `+hh:mm` offsets allowed).
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let (y, m, d) = ymd(date)?;
    let (clock, offset) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let at = time.rfind(['+', '-'])?;
        let (clock, zone) = time.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = zone[1..].split_once(':')?;
        (clock, sign * (hours.parse::<i64>().ok()? * 3600 + minutes.parse::<i64>().ok()? * 60))
    };
    let clock = clock.split('.').next()?;
    let mut hms = clock.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_timestamp(unix: i64) -> String {
    let (days, rest) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    // Inverse of days_from_civil (Howard Hinnant's civil_from_days).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
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
    }

    #[test]
    fn timestamps_take_fractions_and_offsets() {
        assert_eq!(parse_timestamp("2024-03-01T00:00:00Z"), Some(1_709_251_200));
        assert_eq!(parse_timestamp("2024-03-01T12:30:05.123Z"), Some(1_709_251_200 + 45_005));
        assert_eq!(parse_timestamp("2024-03-01T13:30:05.000+01:00"), Some(1_709_251_200 + 45_005));
        assert_eq!(parse_timestamp("2024-02-29T23:30:05-01:00"), Some(1_709_251_200 + 1805));
        assert_eq!(parse_timestamp("2024-03-01"), None);
        assert_eq!(parse_timestamp("2024-03-01T25:00:00Z"), None);
    }

    #[test]
    fn dates_round_trip() {
        for unix in [0, 951_782_400, 1_709_251_200 + 45_005, 4_102_444_799] {
            assert_eq!(parse_timestamp(&format_timestamp(unix)), Some(unix));
        }
    }
}
