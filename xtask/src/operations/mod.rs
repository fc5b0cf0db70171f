//! The operator's events, each proven against a running ioserve: a live binary upgrade
//! under load ([`upgrade`]), hours of mixed load ([`soak`]).

mod paced_wrk;
pub(crate) mod soak;
pub(crate) mod upgrade;
