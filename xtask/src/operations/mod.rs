//! The operator's events, each proven against a running ioserve: a live binary upgrade
//! under load ([`upgrade`]), hours of mixed load ([`soak`]).

pub(crate) mod soak;
pub(crate) mod upgrade;
