//! File IO: the open files that responses share, the open-file cache and the small
//! files it keeps in memory, and the IO
//! strategies that move a file's bytes to the socket through the response writer, and
//! the whole-file digests computed beside them, and the error a failed read of a
//! file gives.

pub mod byte_range;
pub mod cold_threads;
pub mod file_digests;
pub mod kept_contents;
pub mod open_file_cache;
pub mod output;
pub mod pacing;
pub mod page_cache;
pub mod read_error;
pub mod root;
pub mod shared_file;
pub mod strategy;
