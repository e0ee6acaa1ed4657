//! The `Date` header, formatted at most once a second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static CACHE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Calls `f` with the current time as an IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`). The string is rebuilt only when the
/// second changes.
pub fn with_http_date<R>(f: impl FnOnce(&str) -> R) -> R {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != secs {
            c.0 = secs;
            c.1 = httpdate::fmt_http_date(now);
        }
        f(&c.1)
    })
}

/// Formats a Unix time (seconds) as an IMF-fixdate.
pub fn fmt_unix(secs: i64) -> String {
    let t = if secs >= 0 {
        UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH
    };
    httpdate::fmt_http_date(t)
}

/// Slots of the per-thread cache of formatted modification times.
const MTIME_SLOTS: usize = 64;

thread_local! {
    static MTIMES: RefCell<Vec<(i64, std::rc::Rc<str>)>> =
        RefCell::new(vec![(i64::MIN, std::rc::Rc::from("")); MTIME_SLOTS]);
}

/// [`fmt_unix`], remembered per thread in a small direct-mapped cache
/// (files written together share their mtime's second, and a hot set of
/// files has few distinct seconds).
pub fn fmt_unix_cached(secs: i64) -> std::rc::Rc<str> {
    MTIMES.with(|c| {
        let mut c = c.borrow_mut();
        let slot = &mut c[secs.rem_euclid(MTIME_SLOTS as i64) as usize];
        if slot.0 != secs {
            *slot = (secs, std::rc::Rc::from(fmt_unix(secs)));
        }
        slot.1.clone()
    })
}

/// Parses an HTTP date (any of the three RFC 9110 formats) to Unix seconds.
pub fn parse(value: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(value).ok()?;
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64)
}

/// Unix seconds to (year, month, day, hour, minute, second), UTC (also
/// for listings' dates and the server's error log).
pub fn civil(t: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = t.div_euclid(86_400);
    let rem = t.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let s = super::fmt_unix(784111777);
        assert_eq!(s, "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(super::parse(s.as_bytes()), Some(784111777));
        assert_eq!(
            super::parse(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784111777)
        );
        assert_eq!(super::parse(b"garbage"), None);
        super::with_http_date(|d| assert!(d.ends_with(" GMT")));
    }
}
