//! File IO: the open files that responses share, the open-file cache, and the IO
//! strategies that move a file's bytes to the socket through the response writer.

pub(crate) mod open_file_cache;
pub(crate) mod output;
pub(crate) mod shared_file;
pub mod strategy;
