//! The HTTP `Date` value (IMF-fixdate), formatted at most once per second per worker with
//! the cache crate's date writer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    let mut out = Vec::with_capacity(29);
    cache::httpdate::write_http_date(UNIX_EPOCH + Duration::from_secs(secs), &mut out);
    String::from_utf8_lossy(&out).into_owned()
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
