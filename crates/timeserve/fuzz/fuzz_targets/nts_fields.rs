//! Any datagram's NTS extension fields and any NTS-KE request: read without
//! panicking; an NTS request checked against a server's cookie jar is refused (the
//! fuzzer cannot forge AES-SIV), and its NAK echoes the identifier within bounds.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use timeserve::nts::cookie::{CookieJar, MasterSecret};
use timeserve::nts::extension::{classify, verify, write_nak, Classified};
use timeserve::nts::records::{parse_request, Response};

libfuzzer_sys::fuzz_target!(|input: (bool, &[u8])| {
    let (key_exchange, bytes) = input;
    if key_exchange {
        let _ = parse_request(bytes);
        let _ = Response::parse(bytes);
        return;
    }
    if let Classified::Nts(request) = classify(bytes) {
        let mut jar = CookieJar::new(MasterSecret::new([7; 32], Duration::from_secs(86_400)));
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert!(verify(bytes, &request, &mut jar, now).is_err());
        let mut out = [0u8; 1024];
        if let Some(len) = write_nak(&mut out, request.unique_id) {
            assert_eq!(&out[48..len], request.unique_id);
        }
    }
});
