//! What the reply says about the server's clock: read from the kernel's NTP state
//! (`adjtimex`), as chrony and ntpd leave it, or declared by the operator for a host
//! that something else disciplines.
//!
//! The kernel knows whether its clock is synchronised (`STA_UNSYNC`, `TIME_ERROR`), a
//! pending leap second (`TIME_INS`/`TIME_DEL`) and the maximum error that the
//! disciplining daemon set (`maxerror`, which chrony sets to its root distance). It
//! does not know the upstream's stratum, so a synchronised host reports
//! [`DEFAULT_SYNCED_STRATUM`] unless `--stratum` says otherwise. An unsynchronised
//! host answers with LI=3 and stratum 0, as chrony does when it has no source, and
//! clients discard that answer.

use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant, SystemTime};

use crate::packet::{short_format, Leap, NtpTimestamp, ServerState};

/// The stratum reported for a kernel clock that a daemon keeps synchronised, when the
/// operator gives none: a host following public pool servers (mostly stratum 2).
pub const DEFAULT_SYNCED_STRATUM: u8 = 3;

/// The root dispersion reported when the operator declares the clock good but the
/// kernel has no error estimate (it is not disciplined through adjtimex).
pub const DEFAULT_DECLARED_DISPERSION: Duration = Duration::from_millis(1);

/// How often the kernel state is read again.
pub const REFRESH: Duration = Duration::from_secs(1);

/// The kernel's NTP state, as `adjtimex(2)` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelState {
    /// The clock is synchronised (`STA_UNSYNC` clear and the state not `TIME_ERROR`).
    pub synchronised: bool,
    /// A leap second is pending today.
    pub leap: Leap,
    /// The maximum error the disciplining daemon estimates.
    pub max_error: Duration,
}

impl KernelState {
    /// Reads the state with a read-only `adjtimex` (no privilege needed).
    pub fn read() -> io::Result<KernelState> {
        // SAFETY: timex is plain data; all-zero (modes == 0) asks adjtimex to change
        // nothing and only fill the struct in.
        let mut timex: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: `timex` is a valid, writable timex for the duration of the call.
        let state = unsafe { libc::adjtimex(&mut timex) };
        if state < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(KernelState::from_adjtimex(
            state,
            timex.status,
            timex.maxerror,
        ))
    }

    /// Interprets adjtimex's return value, `status` bits and `maxerror` (µs).
    pub fn from_adjtimex(state: i32, status: i32, max_error_us: libc::c_long) -> KernelState {
        let synchronised = status & libc::STA_UNSYNC == 0 && state != libc::TIME_ERROR;
        let leap = match state {
            libc::TIME_INS => Leap::Insert,
            libc::TIME_DEL => Leap::Delete,
            _ => Leap::None,
        };
        KernelState {
            synchronised,
            leap,
            max_error: Duration::from_micros(max_error_us.max(0) as u64),
        }
    }
}

/// What the operator declared about the host's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Declared {
    /// `--stratum`: the host is synchronised at this stratum (1-15), whatever the
    /// kernel says.
    pub stratum: Option<u8>,
    /// `--refid`: the reference identifier.
    pub reference_id: Option<[u8; 4]>,
    /// `--root-dispersion`: the dispersion to report when the kernel has none.
    pub root_dispersion: Option<Duration>,
}

/// Parses a `--refid`: an IPv4 address (an upstream server, stratum 2 and above) or
/// one to four ASCII letters or digits (a reference clock, stratum 1: GPS, PPS...).
pub fn parse_reference_id(text: &str) -> Result<[u8; 4], String> {
    if let Ok(address) = text.parse::<Ipv4Addr>() {
        return Ok(address.octets());
    }
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!(
            "invalid reference id '{text}': expected an IPv4 address or 1-4 ASCII letters and digits (e.g. GPS, PPS, LOCL)"
        ));
    }
    let mut id = [0u8; 4];
    id[..text.len()].copy_from_slice(text.as_bytes());
    Ok(id)
}

/// The server state a reply carries, given the kernel's state and the declaration.
pub fn server_state(
    kernel: &KernelState,
    declared: &Declared,
    precision: i8,
    now: SystemTime,
) -> ServerState {
    let reference_time = NtpTimestamp::from_system_time(now);
    match (declared.stratum, kernel.synchronised) {
        (None, false) => ServerState {
            leap: Leap::Unsynchronised,
            stratum: 0,
            precision,
            root_delay: 0,
            root_dispersion: short_format(kernel.max_error),
            reference_id: [0; 4],
            reference_time: NtpTimestamp::ZERO,
        },
        (stratum, synchronised) => {
            let dispersion = if synchronised {
                kernel.max_error
            } else {
                declared
                    .root_dispersion
                    .unwrap_or(DEFAULT_DECLARED_DISPERSION)
            };
            ServerState {
                leap: kernel.leap,
                stratum: stratum.unwrap_or(DEFAULT_SYNCED_STRATUM),
                precision,
                root_delay: 0,
                root_dispersion: short_format(dispersion),
                reference_id: declared.reference_id.unwrap_or(*b"KERN"),
                reference_time,
            }
        }
    }
}

/// The precision exponent of the system clock: log2 of the time one
/// `clock_gettime(CLOCK_REALTIME)` takes (the median of a few hundred reads), as chrony
/// measures it; at least -30 (1 ns).
pub fn measure_precision() -> i8 {
    let mut samples: Vec<u128> = (0..301)
        .map(|_| {
            let start = Instant::now();
            let _ = std::hint::black_box(SystemTime::now());
            start.elapsed().as_nanos().max(1)
        })
        .collect();
    samples.sort_unstable();
    let nanos = samples[samples.len() / 2] as f64;
    ((nanos * 1e-9).log2().ceil() as i8).clamp(-30, 0)
}

/// A worker's copy of the server state, read from the kernel again every
/// [`REFRESH`].
#[derive(Debug)]
pub struct SyncCache {
    declared: Declared,
    precision: i8,
    state: ServerState,
    read_at: Option<Instant>,
}

impl SyncCache {
    /// A cache that reads the kernel on first use.
    pub fn new(declared: Declared, precision: i8) -> SyncCache {
        let kernel = KernelState {
            synchronised: false,
            leap: Leap::None,
            max_error: Duration::ZERO,
        };
        SyncCache {
            declared,
            precision,
            state: server_state(&kernel, &declared, precision, SystemTime::now()),
            read_at: None,
        }
    }

    /// The current state, reading the kernel when the copy is older than [`REFRESH`].
    pub fn state(&mut self, now: Instant) -> &ServerState {
        if self
            .read_at
            .is_none_or(|at| now.duration_since(at) >= REFRESH)
        {
            if let Ok(kernel) = KernelState::read() {
                self.state =
                    server_state(&kernel, &self.declared, self.precision, SystemTime::now());
            }
            self.read_at = Some(now);
        }
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNSYNCED: KernelState = KernelState {
        synchronised: false,
        leap: Leap::None,
        max_error: Duration::from_secs(16),
    };

    #[test]
    fn adjtimex_states_map_to_leap_and_sync() {
        let unsynced = KernelState::from_adjtimex(libc::TIME_ERROR, libc::STA_UNSYNC, 16_000_000);
        assert_eq!(unsynced, UNSYNCED);
        let synced = KernelState::from_adjtimex(libc::TIME_OK, libc::STA_PLL, 2_500);
        assert!(synced.synchronised);
        assert_eq!(synced.max_error, Duration::from_micros(2_500));
        let inserting = KernelState::from_adjtimex(libc::TIME_INS, libc::STA_INS, 1);
        assert_eq!(inserting.leap, Leap::Insert);
        assert_eq!(
            KernelState::from_adjtimex(libc::TIME_DEL, 0, 1).leap,
            Leap::Delete
        );
    }

    #[test]
    fn an_unsynchronised_kernel_says_so_unless_the_operator_declares_a_stratum() {
        let now = SystemTime::now();
        let honest = server_state(&UNSYNCED, &Declared::default(), -24, now);
        assert_eq!((honest.leap, honest.stratum), (Leap::Unsynchronised, 0));

        let declared = Declared {
            stratum: Some(2),
            reference_id: Some(*b"GPS\0"),
            root_dispersion: None,
        };
        let state = server_state(&UNSYNCED, &declared, -24, now);
        assert_eq!((state.leap, state.stratum), (Leap::None, 2));
        assert_eq!(state.reference_id, *b"GPS\0");
        assert_eq!(
            state.root_dispersion,
            short_format(DEFAULT_DECLARED_DISPERSION)
        );
    }

    #[test]
    fn a_synchronised_kernel_gives_its_error_and_leap() {
        let kernel = KernelState {
            synchronised: true,
            leap: Leap::Delete,
            max_error: Duration::from_millis(3),
        };
        let state = server_state(&kernel, &Declared::default(), -20, SystemTime::now());
        assert_eq!(
            (state.leap, state.stratum),
            (Leap::Delete, DEFAULT_SYNCED_STRATUM)
        );
        assert_eq!(
            state.root_dispersion,
            short_format(Duration::from_millis(3))
        );
        assert_ne!(state.reference_time, NtpTimestamp::ZERO);
    }

    #[test]
    fn reference_ids() {
        assert_eq!(parse_reference_id("192.0.2.1"), Ok([192, 0, 2, 1]));
        assert_eq!(parse_reference_id("PPS"), Ok(*b"PPS\0"));
        for bad in ["", "TOOLONG", "a b", "é"] {
            let error = parse_reference_id(bad).unwrap_err();
            assert!(error.contains("IPv4 address or 1-4 ASCII"), "{error}");
        }
    }

    #[test]
    fn precision_is_plausible() {
        // A clock read takes between 1 ns and 1 ms on anything this runs on.
        assert!((-30..=-10).contains(&measure_precision()));
    }

    #[test]
    fn this_kernel_state_reads() {
        KernelState::read().unwrap();
    }
}
