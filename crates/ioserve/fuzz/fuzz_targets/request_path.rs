//! No request path that sanitizing accepts can leave the served root.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ioserve::fuzzing::request_path(data));
