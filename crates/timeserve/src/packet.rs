//! The NTP packet (RFC 5905 §7.3): classifying what arrives and writing the reply.
//!
//! Pure functions over bytes, so that the fuzz target and the tests reach every branch
//! without a socket. A request is answered only when it is a client request (mode 3,
//! or an NTPv1 packet, whose mode field was reserved and is 0) of version 1 to 4; every
//! other datagram is dropped with a [`DropReason`], never answered.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The length of an NTP header without extension fields or MAC.
pub const HEADER_LEN: usize = 48;

/// The largest request looked at; longer datagrams are dropped (`bad_length`).
/// Extension fields and a MAC fit well within it.
pub const MAX_REQUEST_LEN: usize = 1024;

/// Seconds from the NTP epoch (1900-01-01) to the Unix epoch (1970-01-01).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// Association modes (RFC 5905 figure 10).
const MODE_RESERVED: u8 = 0;
const MODE_CLIENT: u8 = 3;
const MODE_SERVER: u8 = 4;

/// The well-known NTP port: an NTPv1 mode-0 packet from it is a peer's, not a client's.
const NTP_PORT: u16 = 123;

/// A 64-bit NTP timestamp: seconds since 1900 (era 0 wraps in 2036) and a 32-bit
/// binary fraction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NtpTimestamp(pub u64);

impl NtpTimestamp {
    /// The zero timestamp ("unknown").
    pub const ZERO: NtpTimestamp = NtpTimestamp(0);

    /// A Unix time (seconds and nanoseconds since 1970) as an NTP timestamp, in the
    /// era it falls in (the seconds wrap modulo 2^32, as RFC 5905 §6 specifies).
    pub fn from_unix(secs: u64, nanos: u32) -> NtpTimestamp {
        let seconds = secs.wrapping_add(NTP_UNIX_OFFSET) & 0xffff_ffff;
        // nanos < 1e9, so the fraction is < 2^32.
        let fraction = (u64::from(nanos) << 32) / 1_000_000_000;
        NtpTimestamp((seconds << 32) | fraction)
    }

    /// A `SystemTime` as an NTP timestamp; a time before 1970 is clamped to 1970.
    pub fn from_system_time(time: SystemTime) -> NtpTimestamp {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        NtpTimestamp::from_unix(since.as_secs(), since.subsec_nanos())
    }

    /// The Unix time in era 0 (1900-2036) or, for seconds below 2^31, era 1
    /// (2036-2104), as RFC 4330 §3 suggests clients read it.
    pub fn to_unix(self) -> Duration {
        let seconds = self.0 >> 32;
        let unix = if seconds & 0x8000_0000 != 0 {
            seconds - NTP_UNIX_OFFSET
        } else {
            seconds + (1 << 32) - NTP_UNIX_OFFSET
        };
        let nanos = ((self.0 & 0xffff_ffff) * 1_000_000_000) >> 32;
        Duration::new(unix, nanos as u32)
    }

    fn read(bytes: &[u8]) -> NtpTimestamp {
        NtpTimestamp(u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")))
    }
}

/// A duration in NTP's short format (16.16 fixed-point seconds), saturating at the
/// largest value (about 65536 s).
pub fn short_format(duration: Duration) -> u32 {
    let fixed = (duration.as_nanos() << 16) / 1_000_000_000;
    u32::try_from(fixed).unwrap_or(u32::MAX)
}

/// The leap indicator (RFC 5905 figure 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leap {
    /// No warning.
    None = 0,
    /// The last minute of the day has 61 seconds.
    Insert = 1,
    /// The last minute of the day has 59 seconds.
    Delete = 2,
    /// The clock is unsynchronised (alarm).
    Unsynchronised = 3,
}

/// Why a datagram was not answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than the 48-byte header.
    Short,
    /// Longer than the header but not a whole number of 32-bit words, or longer than
    /// [`MAX_REQUEST_LEN`].
    BadLength,
    /// Version 0 or above 4.
    Version,
    /// Not a client request: symmetric, server, broadcast, control (6), private (7),
    /// or an NTPv1 mode-0 packet from port 123 (a peer).
    Mode,
    /// From port 0, which no client can be answered at.
    SourcePort,
    /// NTS extension fields that do not make an authenticated request (missing,
    /// repeated or cut short), or NTS fields on a version other than 4.
    Nts,
}

impl DropReason {
    /// Every reason, in the order metrics list them.
    pub const ALL: [DropReason; 6] = [
        DropReason::Short,
        DropReason::BadLength,
        DropReason::Version,
        DropReason::Mode,
        DropReason::SourcePort,
        DropReason::Nts,
    ];

    /// The reason's name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Short => "short",
            DropReason::BadLength => "bad_length",
            DropReason::Version => "version",
            DropReason::Mode => "mode",
            DropReason::SourcePort => "source_port",
            DropReason::Nts => "nts_malformed",
        }
    }

    /// The reason's index in [`DropReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The fields of a client request that a reply uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The version (1-4), answered in kind.
    pub version: u8,
    /// The client's poll exponent (log2 seconds), echoed.
    pub poll: i8,
    /// The client's transmit timestamp, returned as the reply's origin timestamp.
    pub transmit: NtpTimestamp,
}

impl Request {
    /// Classifies one datagram of `bytes` received from `source_port`.
    pub fn parse(bytes: &[u8], source_port: u16) -> Result<Request, DropReason> {
        if bytes.len() < HEADER_LEN {
            return Err(DropReason::Short);
        }
        if bytes.len() > MAX_REQUEST_LEN || !bytes.len().is_multiple_of(4) {
            return Err(DropReason::BadLength);
        }
        if source_port == 0 {
            return Err(DropReason::SourcePort);
        }
        let version = (bytes[0] >> 3) & 0x7;
        let mode = bytes[0] & 0x7;
        if !(1..=4).contains(&version) {
            return Err(DropReason::Version);
        }
        // An NTPv1 packet has no mode field: from any port but 123 it is a client's
        // request (chrony and ntpd read it so too).
        let client = mode == MODE_CLIENT
            || (version == 1 && mode == MODE_RESERVED && source_port != NTP_PORT);
        if !client {
            return Err(DropReason::Mode);
        }
        Ok(Request {
            version,
            poll: bytes[2] as i8,
            transmit: NtpTimestamp::read(&bytes[40..48]),
        })
    }
}

/// The server's side of a reply: its synchronisation state and the two timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerState {
    /// Leap indicator.
    pub leap: Leap,
    /// Stratum (0 = unspecified, 1 = primary, 2-15 secondary).
    pub stratum: u8,
    /// Precision exponent (log2 seconds) of the system clock.
    pub precision: i8,
    /// Root delay, short format.
    pub root_delay: u32,
    /// Root dispersion, short format.
    pub root_dispersion: u32,
    /// Reference identifier (four ASCII bytes at stratum 0 and 1, an IPv4 address or
    /// an address hash above).
    pub reference_id: [u8; 4],
    /// When the system clock was last known to be set or corrected.
    pub reference_time: NtpTimestamp,
}

/// The kiss code a rate-limited client gets (RFC 5905 §7.4).
pub const KISS_RATE: [u8; 4] = *b"RATE";

/// The smallest poll exponent a rate-limited client is told to use, clamped to
/// RFC 5905's MAXPOLL (17).
fn kiss_poll(request_poll: i8, min_poll: i8) -> i8 {
    request_poll.max(min_poll).min(17)
}

/// Writes the 48-byte server reply to `request` into `out`.
///
/// `receive` is T2 (when the request arrived), `transmit` T3 (just before sending).
pub fn write_reply(
    out: &mut [u8; HEADER_LEN],
    request: &Request,
    state: &ServerState,
    receive: NtpTimestamp,
    transmit: NtpTimestamp,
) {
    out[0] = ((state.leap as u8) << 6) | (request.version << 3) | MODE_SERVER;
    out[1] = state.stratum;
    out[2] = request.poll as u8;
    out[3] = state.precision as u8;
    out[4..8].copy_from_slice(&state.root_delay.to_be_bytes());
    out[8..12].copy_from_slice(&state.root_dispersion.to_be_bytes());
    out[12..16].copy_from_slice(&state.reference_id);
    out[16..24].copy_from_slice(&state.reference_time.0.to_be_bytes());
    out[24..32].copy_from_slice(&request.transmit.0.to_be_bytes());
    out[32..40].copy_from_slice(&receive.0.to_be_bytes());
    out[40..48].copy_from_slice(&transmit.0.to_be_bytes());
}

/// Writes a Kiss-o'-Death RATE reply: unsynchronised, stratum 0, reference id
/// "RATE", and a poll of at least `min_poll` so that the client slows down.
pub fn write_kiss_rate(
    out: &mut [u8; HEADER_LEN],
    request: &Request,
    state: &ServerState,
    min_poll: i8,
    receive: NtpTimestamp,
    transmit: NtpTimestamp,
) {
    let slowed = Request {
        poll: kiss_poll(request.poll, min_poll),
        ..*request
    };
    write_kiss(out, &slowed, state, KISS_RATE, receive, transmit);
}

/// Writes a Kiss-o'-Death reply with `code` (RFC 5905 §7.4): unsynchronised,
/// stratum 0, the code as reference id, no reference time.
pub fn write_kiss(
    out: &mut [u8; HEADER_LEN],
    request: &Request,
    state: &ServerState,
    code: [u8; 4],
    receive: NtpTimestamp,
    transmit: NtpTimestamp,
) {
    let kiss = ServerState {
        leap: Leap::Unsynchronised,
        stratum: 0,
        root_delay: 0,
        root_dispersion: 0,
        reference_id: code,
        reference_time: NtpTimestamp::ZERO,
        ..*state
    };
    write_reply(out, request, &kiss, receive, transmit);
}

/// The fields of a reply, as a client reads them (used by tests and load generators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Leap indicator bits (0-3).
    pub leap: u8,
    /// Version.
    pub version: u8,
    /// Mode (4 for a server reply).
    pub mode: u8,
    /// Stratum.
    pub stratum: u8,
    /// Poll exponent.
    pub poll: i8,
    /// Precision exponent.
    pub precision: i8,
    /// Root dispersion, short format.
    pub root_dispersion: u32,
    /// Reference identifier.
    pub reference_id: [u8; 4],
    /// Origin timestamp (the request's transmit timestamp).
    pub origin: NtpTimestamp,
    /// Receive timestamp (T2).
    pub receive: NtpTimestamp,
    /// Transmit timestamp (T3).
    pub transmit: NtpTimestamp,
}

impl Reply {
    /// Reads a reply's header; `None` when shorter than 48 bytes.
    pub fn parse(bytes: &[u8]) -> Option<Reply> {
        if bytes.len() < HEADER_LEN {
            return None;
        }
        Some(Reply {
            leap: bytes[0] >> 6,
            version: (bytes[0] >> 3) & 7,
            mode: bytes[0] & 7,
            stratum: bytes[1],
            poll: bytes[2] as i8,
            precision: bytes[3] as i8,
            root_dispersion: u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
            reference_id: bytes[12..16].try_into().expect("4 bytes"),
            origin: NtpTimestamp::read(&bytes[24..32]),
            receive: NtpTimestamp::read(&bytes[32..40]),
            transmit: NtpTimestamp::read(&bytes[40..48]),
        })
    }
}

/// A client request of `version` carrying `transmit` (for tests and load generators).
pub fn client_request(version: u8, transmit: NtpTimestamp) -> [u8; HEADER_LEN] {
    let mut packet = [0u8; HEADER_LEN];
    let mode = if version == 1 {
        MODE_RESERVED
    } else {
        MODE_CLIENT
    };
    packet[0] = (version << 3) | mode;
    packet[2] = 6; // poll 64 s
    packet[40..48].copy_from_slice(&transmit.0.to_be_bytes());
    packet
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ServerState {
        ServerState {
            leap: Leap::None,
            stratum: 2,
            precision: -24,
            root_delay: 0,
            root_dispersion: short_format(Duration::from_millis(1)),
            reference_id: *b"LOCL",
            reference_time: NtpTimestamp::from_unix(1_700_000_000, 0),
        }
    }

    #[test]
    fn unix_times_round_trip_through_ntp_timestamps() {
        for (secs, nanos) in [
            (0, 0),
            (1_700_000_000, 999_999_999),
            (2_085_978_495, 1),           // the last second of era 0 (2036-02-07)
            (2_085_978_496, 500_000_000), // era 1
        ] {
            let back = NtpTimestamp::from_unix(secs, nanos).to_unix();
            assert_eq!(back.as_secs(), secs);
            assert!(back.subsec_nanos().abs_diff(nanos) <= 1, "{secs}.{nanos}");
        }
        // 1970 is 2208988800 s after 1900.
        assert_eq!(NtpTimestamp::from_unix(0, 0).0 >> 32, 2_208_988_800);
        assert_eq!(
            NtpTimestamp::from_unix(0, 500_000_000).0 & 0xffff_ffff,
            1 << 31
        );
    }

    #[test]
    fn short_format_is_sixteen_dot_sixteen() {
        assert_eq!(short_format(Duration::from_secs(1)), 1 << 16);
        assert_eq!(short_format(Duration::from_millis(500)), 1 << 15);
        assert_eq!(short_format(Duration::from_secs(1 << 20)), u32::MAX);
    }

    #[test]
    fn every_version_is_answered_in_kind() {
        let sent = NtpTimestamp::from_unix(1_700_000_000, 123_456_789);
        for version in 1..=4 {
            let request = Request::parse(&client_request(version, sent), 40000).unwrap();
            assert_eq!(request.version, version);
            let mut out = [0u8; HEADER_LEN];
            let (t2, t3) = (NtpTimestamp(5 << 32), NtpTimestamp(6 << 32));
            write_reply(&mut out, &request, &state(), t2, t3);
            let reply = Reply::parse(&out).unwrap();
            assert_eq!((reply.version, reply.mode), (version, MODE_SERVER));
            assert_eq!((reply.leap, reply.stratum, reply.poll), (0, 2, 6));
            assert_eq!(reply.origin, sent);
            assert_eq!((reply.receive, reply.transmit), (t2, t3));
            assert_eq!(&reply.reference_id, b"LOCL");
        }
    }

    #[test]
    fn what_is_not_a_client_request_is_dropped_with_its_reason() {
        let good = client_request(4, NtpTimestamp(1));
        assert_eq!(Request::parse(&good[..47], 40000), Err(DropReason::Short));
        assert_eq!(Request::parse(&[], 40000), Err(DropReason::Short));
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(Request::parse(&long, 40000), Err(DropReason::BadLength));
        assert_eq!(
            Request::parse(&[0x23; MAX_REQUEST_LEN + 4], 40000),
            Err(DropReason::BadLength)
        );
        assert_eq!(Request::parse(&good, 0), Err(DropReason::SourcePort));
        for mode in [0, 1, 2, 4, 5, 6, 7] {
            let mut packet = good;
            packet[0] = (4 << 3) | mode;
            assert_eq!(
                Request::parse(&packet, 40000),
                Err(DropReason::Mode),
                "mode {mode}"
            );
        }
        for version in [0, 5, 6, 7] {
            let mut packet = good;
            packet[0] = (version << 3) | MODE_CLIENT;
            assert_eq!(Request::parse(&packet, 40000), Err(DropReason::Version));
        }
        // NTPv1 mode 0 is a client from an ephemeral port, a peer from port 123.
        let v1 = client_request(1, NtpTimestamp(1));
        assert!(Request::parse(&v1, 40000).is_ok());
        assert_eq!(Request::parse(&v1, 123), Err(DropReason::Mode));
        // Extension fields (a longer, word-aligned packet) are tolerated.
        let mut extended = good.to_vec();
        extended.extend_from_slice(&[0; 20]);
        assert!(Request::parse(&extended, 40000).is_ok());
    }

    #[test]
    fn kiss_of_death_says_rate_and_slows_the_client() {
        let request = Request::parse(&client_request(4, NtpTimestamp(9)), 40000).unwrap();
        let mut out = [0u8; HEADER_LEN];
        write_kiss_rate(
            &mut out,
            &request,
            &state(),
            10,
            NtpTimestamp(1),
            NtpTimestamp(2),
        );
        let reply = Reply::parse(&out).unwrap();
        assert_eq!((reply.leap, reply.stratum), (3, 0));
        assert_eq!(&reply.reference_id, b"RATE");
        assert_eq!(reply.poll, 10);
        assert_eq!(reply.origin, NtpTimestamp(9));
        assert_eq!(kiss_poll(20, 4), 17);
    }

    #[test]
    fn any_bytes_parse_without_panicking() {
        // A cheap sweep beside the fuzz target: every first byte and length.
        let mut packet = [0u8; 64];
        for first in 0..=255u8 {
            packet[0] = first;
            for len in 0..packet.len() {
                let _ = Request::parse(&packet[..len], 1);
                let _ = Reply::parse(&packet[..len]);
            }
        }
    }
}
