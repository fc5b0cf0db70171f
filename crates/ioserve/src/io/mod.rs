//! File IO: the open files that responses share, the open-file cache, and the IO
//! strategies that move a file's bytes to the socket through the response writer.

pub mod byte_range;
pub(crate) mod cold_threads;
pub(crate) mod open_file_cache;
pub(crate) mod output;
pub mod root;
pub(crate) mod shared_file;
pub mod strategy;
