//! Integration tests: the real `ioserve` binary, spoken to over TCP, under every IO
//! strategy. Bodies are compared byte for byte with the files.

mod cold;
mod hardening;
mod operations;
mod pacing;
mod precompressed;
mod robustness;
mod semantics;
mod support;
mod zero_copy;
