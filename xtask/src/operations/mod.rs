//! The operator's events, each proven against a running ioserve: a live binary upgrade
//! under load ([`upgrade`]).

pub(crate) mod upgrade;
