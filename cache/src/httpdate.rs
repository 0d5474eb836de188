//! HTTP-date (RFC 9110 §5.6.7) parsing and formatting.
//!
//! Dates arrive from origins (Date, Expires, Last-Modified) and from clients
//! (If-Modified-Since); all three historical formats are accepted, only
//! IMF-fixdate is produced. Parsing never panics: every arithmetic step is
//! checked and anything malformed yields `None`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTH_NAMES: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Parses an HTTP-date in IMF-fixdate, RFC 850 or asctime form, exactly
/// as RFC 9110 §5.6.7 writes them: single spaces, two-digit day and clock
/// fields, a four-digit year (two in RFC 850). Names of days, months and
/// "GMT" are compared without case (the cache-tests suite's "optimal"
/// cases). Anything else (`18  Aug`, `2:01:18`, `UTC`, `18-Aug-2050` after a
/// short day name) is no date: RFC 9111 §5.3 reads such an Expires as the past.
pub fn parse_http_date(raw: &[u8]) -> Option<SystemTime> {
    let s = trim(raw);
    let fields = if let Some(comma) = s.iter().position(|&b| b == b',') {
        let day_name = s.get(..comma)?;
        let rest = s.get(comma + 1..)?.strip_prefix(b" ")?;
        if comma == 3 {
            is_day_name(day_name, false).then_some(())?;
            parse_imf_fixdate(rest)?
        } else {
            is_day_name(day_name, true).then_some(())?;
            parse_rfc850(rest)?
        }
    } else {
        parse_asctime(s)?
    };
    to_system_time(fields)
}

const DAY_NAMES: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `Mon` (`long`: `Monday`), any case.
fn is_day_name(s: &[u8], long: bool) -> bool {
    DAY_NAMES.iter().any(|d| {
        let name = if long {
            d.as_bytes()
        } else {
            &d.as_bytes()[..3]
        };
        s.eq_ignore_ascii_case(name)
    })
}

/// Appends `t` as an IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn write_http_date(t: SystemTime, out: &mut Vec<u8>) {
    use std::io::Write;
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let weekday = WEEKDAYS.get((days % 7) as usize).copied().unwrap_or("Thu");
    let month_name = MONTH_NAMES
        .get(month.saturating_sub(1) as usize)
        .copied()
        .unwrap_or("Jan");
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "{weekday}, {day:02} {month_name} {year:04} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    );
}

struct DateFields {
    year: u64,
    month: u64,
    day: u64,
    hour: u64,
    minute: u64,
    second: u64,
}

/// `06 Nov 1994 08:49:37 GMT`
fn parse_imf_fixdate(s: &[u8]) -> Option<DateFields> {
    let mut parts = s.split(|&b| b == b' ');
    let day = digits(parts.next()?, 2)?;
    let month = month(parts.next()?)?;
    let year = digits(parts.next()?, 4)?;
    let (hour, minute, second) = clock(parts.next()?)?;
    gmt_then_end(&mut parts)?;
    Some(DateFields {
        year,
        month,
        day,
        hour,
        minute,
        second,
    })
}

/// `06-Nov-94 08:49:37 GMT`; the two-digit year read as RFC 9110 §5.6.7 says, against
/// this year ([`full_year`]).
fn parse_rfc850(s: &[u8]) -> Option<DateFields> {
    let mut parts = s.split(|&b| b == b' ');
    let mut date = parts.next()?.split(|&b| b == b'-');
    let day = digits(date.next()?, 2)?;
    let month = month(date.next()?)?;
    let short_year = digits(date.next()?, 2)?;
    if date.next().is_some() {
        return None;
    }
    let year = full_year(short_year, current_year());
    let (hour, minute, second) = clock(parts.next()?)?;
    gmt_then_end(&mut parts)?;
    Some(DateFields {
        year,
        month,
        day,
        hour,
        minute,
        second,
    })
}

/// `Sun Nov  6 08:49:37 1994`: fixed width, a one-digit day after a space.
fn parse_asctime(s: &[u8]) -> Option<DateFields> {
    if s.len() != 24 || [s[3], s[7], s[10], s[19]] != [b' '; 4] {
        return None;
    }
    is_day_name(s.get(..3)?, false).then_some(())?;
    let month = month(s.get(4..7)?)?;
    let day = match s.get(8..10)? {
        [b' ', d] => digits(&[*d], 1)?,
        two => digits(two, 2)?,
    };
    let (hour, minute, second) = clock(s.get(11..19)?)?;
    let year = digits(s.get(20..)?, 4)?;
    Some(DateFields {
        year,
        month,
        day,
        hour,
        minute,
        second,
    })
}

fn gmt_then_end<'a>(parts: &mut impl Iterator<Item = &'a [u8]>) -> Option<()> {
    if !parts.next()?.eq_ignore_ascii_case(b"GMT") || parts.next().is_some() {
        return None;
    }
    Some(())
}

/// `HH:MM:SS`, two digits each.
fn clock(s: &[u8]) -> Option<(u64, u64, u64)> {
    let mut it = s.split(|&b| b == b':');
    let h = digits(it.next()?, 2)?;
    let m = digits(it.next()?, 2)?;
    let sec = digits(it.next()?, 2)?;
    if it.next().is_some() || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some((h, m, sec))
}

/// A two-digit year in this year's century, unless that is more than 50 years ahead of
/// `this_year`: then the most recent past year with those digits (RFC 9110 §5.6.7, a MUST).
fn full_year(two_digits: u64, this_year: u64) -> u64 {
    let year = this_year / 100 * 100 + two_digits;
    if year > this_year + 50 {
        year - 100
    } else {
        year
    }
}

fn current_year() -> u64 {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    civil_from_days(days).0
}

/// Days in `month` of `year` (proleptic Gregorian).
fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        _ => 31,
    }
}

fn month(s: &[u8]) -> Option<u64> {
    let idx = MONTHS.iter().position(|m| s.eq_ignore_ascii_case(&m[..]))?;
    Some(idx as u64 + 1)
}

/// Exactly `width` ASCII digits.
fn digits(s: &[u8], width: usize) -> Option<u64> {
    if s.len() != width || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |acc, &d| acc * 10 + u64::from(d - b'0')))
}

fn to_system_time(f: DateFields) -> Option<SystemTime> {
    // A day the month does not have (`31 Feb`) is malformed, not the next month's.
    if f.day < 1 || f.day > days_in_month(f.year, f.month) || f.year < 1970 {
        return None;
    }
    let days = days_from_civil(f.year, f.month, f.day)?;
    let secs = days
        .checked_mul(86_400)?
        .checked_add(f.hour * 3600 + f.minute * 60 + f.second)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 for a proleptic Gregorian date (year >= 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    // Shift the year so it starts in March: the leap day is then the last
    // day of the shifted year and month lengths follow a simple pattern.
    let y = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = y / 400;
    let year_of_era = y % 400;
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era).checked_sub(719_468)
}

/// Inverse of [`days_from_civil`]: (year, month 1-12, day 1-31).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOV_6_1994: u64 = 784_111_777;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn parses_all_three_formats() {
        for raw in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT ",
        ] {
            assert_eq!(
                parse_http_date(raw.as_bytes()),
                Some(at(NOV_6_1994)),
                "{raw}"
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        for raw in [
            "",
            "0",
            "-1",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 99999 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
        ] {
            assert_eq!(parse_http_date(raw.as_bytes()), None, "{raw}");
        }
    }

    #[test]
    fn days_the_month_does_not_have_are_malformed() {
        for raw in [
            "Mon, 31 Feb 2030 00:00:00 GMT",
            "Thu, 31 Apr 2030 00:00:00 GMT",
            "Fri, 29 Feb 2030 00:00:00 GMT",
            "Tue, 29 Feb 2100 00:00:00 GMT",
        ] {
            assert_eq!(parse_http_date(raw.as_bytes()), None, "{raw}");
        }
        for raw in [
            "Thu, 29 Feb 2032 00:00:00 GMT",
            "Tue, 29 Feb 2000 00:00:00 GMT",
        ] {
            assert!(parse_http_date(raw.as_bytes()).is_some(), "{raw}");
        }
    }

    /// RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is the past one.
    #[test]
    fn two_digit_years_are_read_against_this_year() {
        assert_eq!(full_year(76, 2026), 2076);
        assert_eq!(full_year(77, 2026), 1977);
        assert_eq!(full_year(94, 2026), 1994);
        assert_eq!(full_year(10, 2026), 2010);
        // Late in a century the year stays in it: only a future reading is turned back.
        assert_eq!(full_year(26, 2099), 2026);
        assert_eq!(full_year(0, 2051), 2000);
    }

    /// RFC 9110 §5.6.7 grammar, the forms of the cache-tests suite's
    /// expires-parse: valid ones (any case of names) and invalid ones.
    #[test]
    fn exact_grammar_rfc9110_5_6_7() {
        for raw in [
            "Thu, 18 Aug 2050 02:01:18 GMT",
            "THU, 18 AUG 2050 02:01:18 gMT",
            "Thursday, 18-Aug-50 02:01:18 GMT",
            "Thu Aug  8 02:01:18 2050",
            "Thu Aug 18 02:01:18 2050",
            "Sun, 21 Nov 2286 04:46:39 GMT",
        ] {
            assert!(parse_http_date(raw.as_bytes()).is_some(), "{raw}");
        }
        for raw in [
            "Thu, 18 Aug 2050 02:01:18 UTC",
            "Thu, 18 Aug 2050 02:01:18 AEST",
            "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT",
            "Thu, 18  Aug  2050 02:01:18 GMT",
            "Thu,  18 Aug 2050 02:01:18 GMT",
            "Thu,18 Aug 2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
            "Thu, 8 Aug 2050 02:01:18 GMT",
            "Xyz, 18 Aug 2050 02:01:18 GMT",
            "Thursday, 18-Aug-2050 02:01:18 GMT",
            "Thursday, 18-Aug-50-1 02:01:18 GMT",
            "Thu Aug 8 02:01:18 2050",
            "Thu Aug  8 02:01:18 50",
            "Thu Aug  8  02:01:18 2050",
        ] {
            assert_eq!(parse_http_date(raw.as_bytes()), None, "{raw}");
        }
    }

    #[test]
    fn formats_and_round_trips() {
        let mut out = Vec::new();
        write_http_date(at(NOV_6_1994), &mut out);
        assert_eq!(out, b"Sun, 06 Nov 1994 08:49:37 GMT");
        for secs in [0, 951_782_400, 1_709_164_800, 4_102_444_799] {
            let mut buf = Vec::new();
            write_http_date(at(secs), &mut buf);
            assert_eq!(
                parse_http_date(&buf),
                Some(at(secs)),
                "{}",
                String::from_utf8_lossy(&buf)
            );
        }
    }
}
