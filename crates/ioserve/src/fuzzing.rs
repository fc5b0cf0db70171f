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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// No accepted path has a `..` component, a NUL or a backslash, and none is
        /// absolute.
        #[test]
        fn sanitized_paths_are_plain(target in "/[a-z./%250-9A-F\\\\]{0,40}") {
            super::request_path(target.as_bytes());
        }

        /// Whatever the header, a 206 never carries more bytes than the file.
        #[test]
        fn never_amplifies(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            super::range_header(&data);
        }

        #[test]
        fn never_amplifies_structured(specs in proptest::collection::vec(
                (proptest::option::of(0u64..2000), proptest::option::of(0u64..2000)), 1..80),
                len in 0u64..1500) {
            let specs: Vec<String> = specs.iter().map(|(a, b)| format!(
                "{}-{}", a.map(|v| v.to_string()).unwrap_or_default(),
                b.map(|v| v.to_string()).unwrap_or_default())).collect();
            let mut data = len.to_le_bytes().to_vec();
            data.extend_from_slice(format!("bytes={}", specs.join(",")).as_bytes());
            super::range_header(&data);
        }
    }
}
