//! File IO: the open-file cache and the IO strategies that move a file's bytes to the
//! socket through the response writer.

pub(crate) mod cache;
pub(crate) mod output;
pub mod strategy;
