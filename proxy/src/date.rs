//! The HTTP `Date` value (IMF-fixdate), formatted at most once per second per worker.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::log::civil_from_days;

#[derive(Default)]
pub struct DateCache {
    second: u64,
    text: String,
}

impl DateCache {
    /// `Sun, 06 Nov 1994 08:49:37 GMT` for now.
    pub fn now(&mut self) -> &str {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if secs != self.second || self.text.is_empty() {
            self.second = secs;
            self.text = imf_fixdate(secs);
        }
        &self.text
    }
}

pub fn imf_fixdate(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    let rem = secs % 86_400;
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        day,
        MONTHS[(month as usize).saturating_sub(1) % 12],
        year,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc_example() {
        assert_eq!(
            super::imf_fixdate(784_111_777),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }
}
