//! The server's one cache of the HTTP `Date` header: [`with_http_date`] formats the
//! wall clock's second once per second per thread (worker threads need no ticker and
//! share no cache line for it). The cached clock for hot paths that read the time
//! often is the `ioserve-clock` crate's `CachedClock`.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// The second (since the Unix epoch) of the last `Date` value, and that value.
    static HTTP_DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Calls `f` with the HTTP `Date` value of now (IMF-fixdate: `Sun, 06 Nov 1994 08:49:37
/// GMT`), formatted only when the wall clock's second changed since this thread's last
/// call.
pub fn with_http_date<R>(f: impl FnOnce(&str) -> R) -> R {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    HTTP_DATE.with_borrow_mut(|(cached_secs, text)| {
        if *cached_secs != secs {
            *cached_secs = secs;
            *text = httpdate::fmt_http_date(now);
        }
        f(text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_date_is_the_current_second() {
        // The second can turn between the reads: the cached value is one of the two
        // seconds around it.
        let before = httpdate::fmt_http_date(SystemTime::now());
        let date = with_http_date(str::to_string);
        let after = httpdate::fmt_http_date(SystemTime::now());
        assert!(
            date == before || date == after,
            "{date} is neither {before} nor {after}"
        );
        assert!(date.ends_with(" GMT") && date.len() == 29, "{date}");
    }
}
