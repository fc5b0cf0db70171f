//! Any datagram from any port: classified without panicking, and a request that is
//! accepted gets a reply that echoes its version and transmit timestamp in mode 4.
#![no_main]

use timeserve::packet::{write_kiss_rate, write_reply, Leap, NtpTimestamp, Reply, Request, ServerState};

libfuzzer_sys::fuzz_target!(|input: (u16, &[u8])| {
    let (port, bytes) = input;
    let Ok(request) = Request::parse(bytes, port) else {
        return;
    };
    let state = ServerState {
        leap: Leap::None,
        stratum: 2,
        precision: -24,
        root_delay: 0,
        root_dispersion: 1 << 6,
        reference_id: *b"LOCL",
        reference_time: NtpTimestamp(1 << 32),
    };
    let mut out = [0u8; 48];
    write_reply(&mut out, &request, &state, NtpTimestamp(2 << 32), NtpTimestamp(3 << 32));
    let reply = Reply::parse(&out).expect("48 bytes");
    assert_eq!((reply.version, reply.mode), (request.version, 4));
    assert_eq!(reply.origin, request.transmit);
    write_kiss_rate(&mut out, &request, &state, 6, NtpTimestamp(2 << 32), NtpTimestamp(3 << 32));
    let kiss = Reply::parse(&out).expect("48 bytes");
    assert_eq!((kiss.stratum, &kiss.reference_id), (0, b"RATE"));
});
