//! Integration tests: the real `ioserve` binary, spoken to over TCP, under every IO
//! strategy. Bodies are compared byte for byte with the files.

mod acme;
mod auth;
mod cold;
mod digests;
mod h2_client;
mod h3_client;
mod hardening;
mod http2;
mod http3;
mod listing;
mod operations;
mod pacing;
mod precompressed;
mod robustness;
mod semantics;
mod support;
mod tar_download;
mod tls;
mod zero_copy;
