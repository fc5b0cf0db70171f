//! adler32: every implementation equals the scalar one from any starting state, and a
//! checksum streamed in two pieces or combined from them equals the one-shot value.
#![no_main]

use ioserve_simd::adler32::{self, Adler32};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (state, bytes) = data.split_at(4);
    let (a, b) = (
        u32::from(u16::from_le_bytes([state[0], state[1]])) % 65521,
        u32::from(u16::from_le_bytes([state[2], state[3]])) % 65521,
    );
    let expected = adler32::scalar::update(a, b, bytes);
    for (implementation, function) in adler32::implementations() {
        // SAFETY: implementations() lists only what this CPU runs.
        let got = unsafe { function(a, b, bytes) };
        assert_eq!(got, expected, "{implementation}");
    }
    let split = usize::from(state[0]) * bytes.len() / 256;
    let (first, second) = bytes.split_at(split);
    let mut streamed = Adler32::new();
    streamed.update(first);
    streamed.update(second);
    let whole = adler32::adler32(bytes);
    assert_eq!(streamed.finish(), whole);
    assert_eq!(
        adler32::combine(adler32::adler32(first), adler32::adler32(second), second.len() as u64),
        whole
    );
});
