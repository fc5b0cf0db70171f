//! HTTP semantics: the request head, the target's path, validators and preconditions,
//! ranges, content negotiation, directory listings and tar downloads, RFC 9530 digest
//! fields, Basic authentication; a request resolved (no IO) and replied to.

pub mod auth;
pub mod conditional;
pub mod digest_fields;
pub mod htpasswd;
pub mod listing;
pub mod negotiation;
pub mod path;
pub mod range;
pub mod reply;
pub mod request;
pub mod resolve;
pub mod response;
pub mod site;
pub mod tar;
