//! The file-descriptor budget: does the configuration fit `RLIMIT_NOFILE`?
//!
//! Each admitted connection may hold two descriptors (its socket and the file it is
//! sending, when that file is not in the cache; three with the `buffered` strategy,
//! which opens its own descriptor of the file), a connection being refused with 503
//! holds its socket until it is closed (at most [`refusing`] of them: past that the
//! listeners wait), each worker's open-file cache holds up to `--open-file-cache` more,
//! and the process needs some of its own (listeners, event queues, signal pipes, the
//! root: 24 measured with two workers). When the sum passes the limit, requests would
//! fail with `EMFILE` (500 to the client, a warning per failed accept). So at startup
//! the cache is shrunk to fit, then, if connections alone do not fit, the connection
//! limit is lowered (extra clients get a clean 503), and the numbers are logged.

/// Descriptors the process holds besides connections and cached files.
pub(crate) fn fixed_descriptors(workers: usize) -> u64 {
    // stdio, the root, the metrics listener, signal and log plumbing, a margin; per
    // worker a listener, epoll instances and a waker.
    20 + 4 * workers as u64
}

/// How many connections may be in the middle of being refused (503) at once, beyond
/// the admitted ones: accepting stops past that, and clients wait in the backlog.
pub(crate) fn refusing(max_connections: usize) -> usize {
    (max_connections / 8).max(1)
}

/// What fits the limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fitted {
    /// Open-file cache entries per worker.
    pub open_file_cache: usize,
    /// Connection limit.
    pub max_connections: usize,
    /// What was changed and why, with the numbers; `None` when all fitted.
    pub warning: Option<String>,
}

/// Cached files per worker kept, when there is room, before connections are limited:
/// without a cache every request costs an open and a close (and, with `mmap`, a
/// mapping of its own).
const CACHE_FLOOR: usize = 64;

/// Fits `max_connections` (each holding up to `each` descriptors) and
/// `open_file_cache` (per worker) to `limit` descriptors: first the cache shrinks,
/// down to [`CACHE_FLOOR`] per worker; then the connection limit is lowered; in a very
/// small limit the cache goes too.
pub(crate) fn fit(
    limit: u64,
    workers: usize,
    max_connections: usize,
    each: usize,
    open_file_cache: usize,
) -> Fitted {
    let workers = workers.max(1);
    let fixed = fixed_descriptors(workers) as usize;
    let connections_need = |c: usize| each * c + refusing(c);
    let need = fixed + connections_need(max_connections) + workers * open_file_cache;
    if need as u64 <= limit {
        return Fitted {
            open_file_cache,
            max_connections,
            warning: None,
        };
    }
    let room = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .saturating_sub(fixed);
    let floor = open_file_cache.min(CACHE_FLOOR);
    let said = format!(
        "the open-file limit is {limit} descriptors; --max-connections {max_connections} \
         ({each} each) and --open-file-cache {open_file_cache} per worker x {workers} need {need}"
    );
    if connections_need(max_connections) + workers * floor <= room {
        let cache = (room - connections_need(max_connections)) / workers;
        return Fitted {
            open_file_cache: cache,
            max_connections,
            warning: Some(format!(
                "{said}: the cache is shrunk to {cache} per worker (raise the limit, e.g. \
                 LimitNOFILE= in the unit, to keep it)"
            )),
        };
    }
    // Keep the floor of the cache if a connection still fits beside it.
    let cache = if workers * floor + connections_need(1) <= room {
        floor
    } else {
        0
    };
    let room = room - workers * cache;
    let connections = (1..=room / each.max(1))
        .rev()
        .find(|&c| connections_need(c) <= room)
        .unwrap_or(1);
    Fitted {
        open_file_cache: cache,
        max_connections: connections,
        warning: Some(format!(
            "{said}: the cache keeps {cache} per worker and at most {connections} connections \
             are admitted, more get 503 (raise the limit, e.g. LimitNOFILE= in the unit or \
             ulimit -n)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roomy_limit_changes_nothing() {
        let fitted = fit(1 << 20, 4, 10_000, 2, 1024);
        assert_eq!(
            fitted,
            Fitted {
                open_file_cache: 1024,
                max_connections: 10_000,
                warning: None
            }
        );
    }

    #[test]
    fn the_cache_shrinks_first() {
        // 28 fixed, 2125 for connections, 2 x 1024 cache: 4201 > 3153.
        let fitted = fit(3153, 2, 1000, 2, 1024);
        assert_eq!(
            (fitted.open_file_cache, fitted.max_connections),
            (500, 1000)
        );
        let warning = fitted.warning.unwrap();
        assert!(
            warning.contains("limit is 3153") && warning.contains("shrunk to 500"),
            "{warning}"
        );
    }

    #[test]
    fn then_connections_are_limited() {
        // prlimit --nofile=48 with the defaults: 28 fixed, 20 left: 9 connections of 2
        // and one being refused.
        let fitted = fit(48, 2, 10_000, 2, 1024);
        assert_eq!((fitted.open_file_cache, fitted.max_connections), (0, 9));
        let warning = fitted.warning.unwrap();
        assert!(
            warning.contains("at most 9 connections") && warning.contains("need 23326"),
            "{warning}"
        );
        // Even a tiny limit admits one connection rather than none.
        assert_eq!(fit(3, 2, 10, 2, 0).max_connections, 1);
        // buffered holds three: 20 left is 6 connections and one being refused.
        assert_eq!(fit(48, 2, 10_000, 3, 1024).max_connections, 6);
    }
}
