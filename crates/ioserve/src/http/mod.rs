//! HTTP semantics: the request head, the target's path, validators and preconditions,
//! ranges, content negotiation, directory listings, and the reply they make.

pub(crate) mod conditional;
pub(crate) mod handler;
pub(crate) mod listing;
pub mod negotiation;
pub mod path;
pub mod range;
pub(crate) mod request;
pub(crate) mod response;
