//! Load tests: ioserve against nginx and Go (`loadtest`), SNTP servers under UDP load
//! (`udpload`), and what tracing costs (`probe_overhead`).

pub(crate) mod loadtest;
pub(crate) mod probe_overhead;
pub(crate) mod udpload;
