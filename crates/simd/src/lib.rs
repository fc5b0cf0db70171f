//! SIMD kernels with runtime dispatch: base64, an AES-instruction hash, adler32 and byte
//! count, each with a portable scalar specification.
//!
//! This crate is being built (see the project's simd issue); it has no public API yet.
