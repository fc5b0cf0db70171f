//! HTTP semantics: the request head, the target's path, validators and preconditions,
//! ranges, content negotiation, directory listings; a request resolved (no IO) and replied to.

pub(crate) mod conditional;
pub(crate) mod listing;
pub mod negotiation;
pub mod path;
pub mod range;
pub(crate) mod reply;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod response;
pub(crate) mod site;
