//! Log lines on stderr: `2026-11-30T12:00:00Z LEVEL message`. One line per event, no
//! buffering across threads (each line is one write).
//!
//! Warnings and errors are rate-limited per call site: at most [`LINES_PER_SECOND`] lines of
//! one `warn!`/`error!` in a second of the clock; the rest are counted, and the count is
//! written as one line (`... suppressed ...`, naming the call site) once that second is over.
//! A peer that makes the proxy warn on every request then costs a few lines a second, not
//! the disk.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lines one `warn!` or `error!` call site writes in a second at most.
pub const LINES_PER_SECOND: u32 = 10;

#[derive(Debug, Clone, Copy)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

pub fn line(level: Level, message: std::fmt::Arguments<'_>) {
    let text = format!(
        "{} {} {}\n",
        utc_timestamp(SystemTime::now()),
        level.as_str(),
        message
    );
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The rate limit of one call site of `warn!`/`error!` (a `static` the macro makes).
pub struct Site {
    /// `file:line` of the call, for the suppression line.
    location: &'static str,
    /// The second of the clock the count is for.
    second: AtomicU64,
    count: AtomicU32,
    /// Lines not written since the last suppression line.
    suppressed: AtomicU64,
    /// In [`SUPPRESSING`], the sites the reporting thread looks at.
    listed: AtomicBool,
}

impl Site {
    pub const fn new(location: &'static str) -> Site {
        Site {
            location,
            second: AtomicU64::new(0),
            count: AtomicU32::new(0),
            suppressed: AtomicU64::new(0),
            listed: AtomicBool::new(false),
        }
    }

    /// Whether a line may be written now; counts it as suppressed if not.
    fn admit(&'static self, now: u64) -> bool {
        let second = self.second.load(Ordering::Relaxed);
        if second != now
            && self
                .second
                .compare_exchange(second, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.count.store(0, Ordering::Relaxed);
        }
        if self.count.fetch_add(1, Ordering::Relaxed) < LINES_PER_SECOND {
            return true;
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        if !self.listed.swap(true, Ordering::Relaxed) {
            SUPPRESSING
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self);
            start_reporter();
        }
        false
    }
}

/// Call sites that have suppressed lines at least once.
static SUPPRESSING: Mutex<Vec<&'static Site>> = Mutex::new(Vec::new());

/// Starts, once per process, the thread that writes the suppression counts: a flood that
/// stops still gets its count written.
fn start_reporter() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("log-suppressed".into())
            .spawn(|| loop {
                // Just after the next second of the clock begins.
                let into = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_millis());
                std::thread::sleep(Duration::from_millis(u64::from(1010 - into.min(1000))));
                report_suppressed();
            });
        if let Err(e) = spawned {
            line(
                Level::Error,
                format_args!("cannot start the log's suppression reporter: {e}"),
            );
        }
    });
}

fn report_suppressed() {
    let sites = SUPPRESSING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for site in sites {
        let n = site.suppressed.swap(0, Ordering::Relaxed);
        if n > 0 {
            line(
                Level::Warn,
                format_args!(
                    "{n} more lines of the warning at {} suppressed (at most {LINES_PER_SECOND} a second)",
                    site.location
                ),
            );
        }
    }
}

/// Writes a `warn!`/`error!` line if its call site is within its rate.
pub fn limited(site: &'static Site, level: Level, message: std::fmt::Arguments<'_>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if site.admit(now) {
        line(level, message);
    }
}

/// RFC 3339 UTC timestamp, second precision.
pub fn utc_timestamp(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// well-known algorithm, written out here).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::line($crate::log::Level::Info, format_args!($($arg)*)) };
}

/// A warning, rate-limited per call site (the module doc says how).
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {{
        static SITE: $crate::log::Site = $crate::log::Site::new(concat!(file!(), ":", line!()));
        $crate::log::limited(&SITE, $crate::log::Level::Warn, format_args!($($arg)*))
    }};
}

/// An error, rate-limited per call site like a warning.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => {{
        static SITE: $crate::log::Site = $crate::log::Site::new(concat!(file!(), ":", line!()));
        $crate::log::limited(&SITE, $crate::log::Level::Error, format_args!($($arg)*))
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_writes_its_rate_a_second_and_counts_the_rest() {
        static SITE: Site = Site::new("here:1");
        let admitted = (0..25).filter(|_| SITE.admit(100)).count();
        assert_eq!(admitted, LINES_PER_SECOND as usize);
        assert_eq!(SITE.suppressed.load(Ordering::Relaxed), 15);
        // The next second starts a new count.
        assert!(SITE.admit(101));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_423), (2025, 12, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(
            utc_timestamp(UNIX_EPOCH + std::time::Duration::from_secs(86_399)),
            "1970-01-01T23:59:59Z"
        );
    }
}
