//! Invariant checks shared by the property tests (run in `cargo test`) and the
//! cargo-fuzz targets (`cargo xtask fuzz`). Each function panics when an invariant is
//! broken and is fine with any input.

use std::os::unix::ffi::OsStrExt;
use std::path::Component;

use crate::http::path::sanitize;
use crate::http::range::{plan, RangePlan, MAX_RANGES};

/// The range planner never amplifies: a 206 carries at most the file's length, every
/// range lies inside the file, ranges of a multipart response never overlap.
///
/// The first 8 bytes of `data` pick the length (modulo 1 MiB), the rest is the header.
pub fn range_header(data: &[u8]) {
    let (len, header) = match data.split_first_chunk::<8>() {
        Some((len, header)) => (u64::from_le_bytes(*len) % (1 << 20), header),
        None => (0, data),
    };
    match plan(Some(header), len) {
        RangePlan::Full | RangePlan::Unsatisfiable => {}
        RangePlan::Single(range) => assert!(range.len > 0 && range.end() <= len),
        RangePlan::Multi(ranges) => {
            assert!(ranges.len() >= 2 && ranges.len() <= MAX_RANGES);
            assert!(ranges.iter().all(|r| r.len > 0 && r.end() <= len));
            assert!(ranges.iter().map(|r| r.len).sum::<u64>() <= len);
            let mut sorted = ranges.clone();
            sorted.sort();
            assert!(
                sorted.windows(2).all(|w| w[0].end() <= w[1].start),
                "overlap in {ranges:?}"
            );
        }
    }
}

/// An accepted request path is relative, made of plain components only (no `..`, no
/// root, no prefix), and holds no NUL and no backslash.
pub fn request_path(data: &[u8]) {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(safe) = sanitize(target) else {
        return;
    };
    assert!(safe.relative.is_relative(), "{target:?}");
    for component in safe.relative.components() {
        assert!(
            matches!(component, Component::Normal(_)),
            "{target:?} gave {component:?}"
        );
    }
    let bytes = safe.relative.as_os_str().as_bytes();
    assert!(!bytes.contains(&0) && !bytes.contains(&b'\\'), "{target:?}");
}
