//! The Range planner never amplifies and never leaves the file, whatever the header.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ioserve::fuzzing::range_header(data));
