//! The `date` header, formatted at most once per second.
//!
//! Every response carries `date` (RFC 9110 §6.6.1: an origin server with a clock MUST send it),
//! and formatting an IMF-fixdate costs a calendar conversion; at 100k responses a second that
//! is worth caching. One `DateCache` serves every connection of a loop (the I/O layer owns it
//! and refreshes it with the loop's wall clock); `refresh` only formats when the second
//! changed. The clock is passed in, so tests need no wall-clock luck. Formatting is the
//! `httpdate` crate's (hyper's choice: small, no dependencies, exactly IMF-fixdate).

use std::time::{SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT`: always 29 bytes.
pub const DATE_LEN: usize = 29;

pub struct DateCache {
    second: u64,
    text: [u8; DATE_LEN],
}

impl DateCache {
    pub fn new(now: SystemTime) -> DateCache {
        let mut d = DateCache { second: u64::MAX, text: [b' '; DATE_LEN] };
        d.refresh(now);
        d
    }

    /// Bring the text up to `now`'s second; a no-op within the same second.
    pub fn refresh(&mut self, now: SystemTime) {
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second == self.second {
            return;
        }
        self.second = second;
        let text = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(second));
        // IMF-fixdate is fixed width for years 1000-9999; anything else keeps the last text.
        if let Ok(t) = <[u8; DATE_LEN]>::try_from(text.as_bytes()) {
            self.text = t;
        }
    }

    /// The value of the `date` field.
    pub fn value(&self) -> &[u8] {
        &self.text
    }
}

/// The fields the server adds to each response it writes when the application did not give
/// them: `date` (a `DateCache`'s value) and `server` (the configured value; `None` sends none).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stamp<'a> {
    pub date: Option<&'a [u8]>,
    pub server: Option<&'a [u8]>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_imf_fixdate_and_caches_per_second() {
        // RFC 9110 §5.6.7's example.
        let t = UNIX_EPOCH + Duration::from_secs(784111777);
        let mut d = DateCache::new(t);
        assert_eq!(d.value(), b"Sun, 06 Nov 1994 08:49:37 GMT");
        d.refresh(t + Duration::from_millis(999));
        assert_eq!(d.value(), b"Sun, 06 Nov 1994 08:49:37 GMT");
        d.refresh(t + Duration::from_secs(1));
        assert_eq!(d.value(), b"Sun, 06 Nov 1994 08:49:38 GMT");
        d.refresh(UNIX_EPOCH + Duration::from_secs(951782400)); // leap day 2000
        assert_eq!(d.value(), b"Tue, 29 Feb 2000 00:00:00 GMT");
    }
}
