//! Calendar time, in one place: the date-times providers send, read to unix seconds, and unix time written back as
//! UTC date-times for payloads, the CLI and the dashboard. The calendar arithmetic is the `time` crate's.

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

/// Parses an ISO 8601 date-time, as providers send it, to unix seconds.
///
/// Accepted: `YYYY-MM-DDTHH:MM:SS`, then an optional fraction of any length (truncated: payhook orders events by
/// the second), then `Z`, `±HH:MM`, `±HHMM`, `±HH` or nothing (read as UTC: Paystack's older fields carry no zone).
/// The separator may also be `t` or a space. Out-of-range fields (`02-30`, `24:00`) are rejected; a leap second
/// (`:60`) is read as the next second.
///
/// The layout is read here because it is more lenient than RFC 3339 (no zone, `±HH`); the date and the offset
/// are the `time` crate's.
pub fn parse_iso8601(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = i32::try_from(digits(&b[0..4])?).ok()?;
    let month = Month::try_from(u8::try_from(digits(&b[5..7])?).ok()?).ok()?;
    let date = Date::from_calendar_date(year, month, u8::try_from(digits(&b[8..10])?).ok()?).ok()?;
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    let leap = second == 60;
    let time = Time::from_hms(
        u8::try_from(hour).ok()?,
        u8::try_from(minute).ok()?,
        u8::try_from(if leap { 59 } else { second }).ok()?,
    )
    .ok()?;
    let mut rest = &b[19..];
    if let [b'.', tail @ ..] = rest {
        let n = tail.iter().take_while(|d| d.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &tail[n..];
    }
    let offset_secs = match rest {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), zone @ ..] => {
            let (h, m) = match zone {
                [h1, h2] => (digits(&[*h1, *h2])?, 0),
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?),
                _ => return None,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let secs = i64::from(h * 3600 + m * 60);
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let local = PrimitiveDateTime::new(date, time).assume_utc().unix_timestamp();
    Some(local + i64::from(leap) - offset_secs)
}

/// Reads a run of ASCII digits as a number; `None` if any byte is not a digit.
fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, d| d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0')))
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, UTC), the shape providers' payloads carry.
pub fn rfc3339(secs: i64) -> String {
    format!("{}Z", written(secs, 'T'))
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` in UTC, as the CLI's tables and the dashboard show times.
pub fn display_ms(ms: i64) -> String {
    written(ms.div_euclid(1000), ' ')
}

/// `YYYY-MM-DD`, `between`, `HH:MM:SS` of unix seconds in UTC.
fn written(secs: i64, between: char) -> String {
    let t = utc(secs);
    let (date, time) = (t.date(), t.time());
    format!(
        "{:04}-{:02}-{:02}{between}{:02}:{:02}:{:02}",
        date.year(),
        u8::from(date.month()),
        date.day(),
        time.hour(),
        time.minute(),
        time.second()
    )
}

/// The UTC date-time of unix seconds, clamped to the years the `time` crate represents (-9999 to 9999): a stored
/// timestamp that far out is corrupt, and showing the nearest representable instant beats failing a page.
fn utc(secs: i64) -> OffsetDateTime {
    let (min, max) = (PrimitiveDateTime::MIN.assume_utc(), PrimitiveDateTime::MAX.assume_utc());
    OffsetDateTime::from_unix_timestamp(secs.clamp(min.unix_timestamp(), max.unix_timestamp())).unwrap_or(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_in_every_shape_providers_send() {
        assert_eq!(parse_iso8601("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso8601("2016-03-29T10:47:12.000Z"), Some(1_459_248_432));
        assert_eq!(parse_iso8601("2016-03-29T10:47:12"), Some(1_459_248_432));
        assert_eq!(parse_iso8601("2016-03-29 10:47:12.123456789z"), Some(1_459_248_432));
        assert_eq!(parse_iso8601("2024-01-01T10:00:00-05:00"), Some(1_704_121_200));
        assert_eq!(parse_iso8601("2024-01-01T15:00:00+00:00"), Some(1_704_121_200));
        assert_eq!(parse_iso8601("2024-01-01T20:30:00+0530"), Some(1_704_121_200));
        assert_eq!(parse_iso8601("2019-06-28T18:03:50+01:00"), Some(1_561_741_430));
        assert_eq!(parse_iso8601("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(parse_iso8601("1969-12-31T23:59:59Z"), Some(-1));
        assert_eq!(parse_iso8601("2016-12-31T23:59:60Z"), Some(1_483_228_800), "a leap second is the next second");
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for s in [
            "",
            "2024-01-01",
            "2024-01-01T10:00",
            "2023-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-00-10T00:00:00Z",
            "2024-01-00T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T10:60:00Z",
            "2024-01-01T10:00:61Z",
            "2024-01-01T10:00:00.Z",
            "2024-01-01T10:00:00+5",
            "2024-01-01T10:00:00+25:00",
            "2024-01-01T10:00:00 UTC",
            "2024/01/01T10:00:00Z",
            "+024-01-01T10:00:00Z",
            "2024-01-01T10:00:00ZZ",
            "1700000000",
        ] {
            assert_eq!(parse_iso8601(s), None, "{s}");
        }
    }

    #[test]
    fn written_times_read_back_and_are_utc_calendar_dates() {
        for secs in [0, 7, -1, 951_782_400, 1_459_248_432, 1_704_121_200, 4_102_444_800, -62_135_596_800] {
            assert_eq!(parse_iso8601(&rfc3339(secs)), Some(secs), "{secs}");
        }
        assert_eq!(rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(display_ms(0), "1970-01-01 00:00:00");
        assert_eq!(display_ms(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03");
        assert_eq!(display_ms(1_700_000_000_123), "2023-11-14 22:13:20");
        assert_eq!(display_ms(-1), "1969-12-31 23:59:59");
        assert_eq!(display_ms(i64::MAX), "9999-12-31 23:59:59", "clamped, not a panic");
    }
}
