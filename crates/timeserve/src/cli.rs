//! The `timeserve` command line, in the library so that the man page and the shell
//! completions (the `cli-docs` crate) are written from the definition the binary
//! parses with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::server::DEFAULT_BATCH;
use crate::sync::parse_reference_id;

/// An SNTPv4 server (RFC 5905 server mode) on one SO_REUSEPORT UDP socket per worker.
///
/// Replies carry the kernel's receive timestamp and a transmit timestamp taken just
/// before sending. Whether they call the clock synchronised comes from the kernel
/// (adjtimex, as chrony or ntpd keep it): an unsynchronised host answers with leap
/// indicator 3 and stratum 0, which clients discard, unless --stratum declares the
/// host synchronised by other means.
#[derive(Debug, Parser)]
#[command(name = "timeserve", version)]
pub struct Args {
    /// Address to serve on; repeat for several (default: 0.0.0.0:123 and [::]:123).
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,

    /// Sockets and threads per address (default: one per CPU this process may use).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,

    /// Pin worker i of each address to the i-th CPU this process may use.
    #[arg(long)]
    pub pin: bool,

    /// Receive buffer of each socket in bytes (SO_RCVBUF; as root past
    /// net.core.rmem_max). Default: the kernel's.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..))]
    pub receive_buffer: Option<u32>,

    /// Datagrams taken per recvmmsg call.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH as u16,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub batch: u16,

    /// Declare the host synchronised at this stratum (1-15), whatever the kernel
    /// says: for a clock disciplined outside adjtimex (PTP, a GPS daemon). Default:
    /// the kernel's state, reported as stratum 3 when synchronised.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=15))]
    pub stratum: Option<u8>,

    /// Reference id: an IPv4 address (upstream server) or 1-4 ASCII letters and
    /// digits (a reference clock: GPS, PPS...). Default: KERN.
    #[arg(long, value_name = "ID", value_parser = parse_reference_id)]
    pub refid: Option<[u8; 4]>,

    /// Root dispersion to report when --stratum is given and the kernel has no error
    /// estimate (500ms, 1ms, 0.002...). Default: 1ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub root_dispersion: Option<Duration>,

    /// Limit each client address to one request per DURATION on average (500ms, 2s,
    /// 1m, or seconds); over it, one Kiss-o'-Death RATE reply per interval, then
    /// silence. Default: no limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub rate_limit_interval: Option<Duration>,

    /// Requests a client may send back to back under --rate-limit-interval.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub rate_limit_burst: u32,

    /// Serve Prometheus metrics at http://ADDR/metrics (and /healthz).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// Serve Network Time Security (RFC 8915) with this certificate chain (PEM):
    /// the key exchange (NTS-KE, TLS 1.3) on TCP port 4460 and authenticated NTP on
    /// the UDP workers. Needs --nts-key; both are read again on SIGHUP.
    #[arg(long, value_name = "PATH", requires = "nts_key", help_heading = "NTS")]
    pub nts_cert: Option<PathBuf>,

    /// The private key (PEM) of --nts-cert.
    #[arg(long, value_name = "PATH", requires = "nts_cert", help_heading = "NTS")]
    pub nts_key: Option<PathBuf>,

    /// Address of the NTS key exchange; repeat for several. Default: the IP of each
    /// --listen address, port 4460.
    #[arg(long, value_name = "ADDR", requires = "nts_cert", help_heading = "NTS")]
    pub nts_ke_listen: Vec<SocketAddr>,

    /// File of the master secret cookies are sealed under (64 hex digits; made,
    /// mode 0600, when missing; read again on SIGHUP). Replicas behind one address
    /// share it so that each opens the others' cookies, and a restart keeps clients'
    /// cookies. Default: a random secret per start.
    #[arg(long, value_name = "PATH", requires = "nts_cert", help_heading = "NTS")]
    pub nts_key_file: Option<PathBuf>,

    /// How often the cookie key changes (derived from the master secret, so
    /// replicas change together); a cookie opens for 7 more periods.
    #[arg(long, value_name = "DURATION", default_value = "1d", value_parser = parse_rotation,
          help_heading = "NTS")]
    pub nts_key_rotation: Duration,

    /// NTP server named to clients in the key exchange (a host name or address),
    /// when they should not use the key exchange's own address.
    #[arg(long, value_name = "HOST", requires = "nts_cert", help_heading = "NTS",
          value_parser = parse_ntp_server)]
    pub nts_ntp_server: Option<String>,

    /// NTP port named to clients in the key exchange, when not 123.
    #[arg(long, value_name = "PORT", requires = "nts_cert", help_heading = "NTS",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub nts_ntp_port: Option<u16>,

    /// Key exchanges served at once, a quarter of them (at least one) from any one
    /// address; more are closed unanswered.
    #[arg(long, value_name = "N", default_value_t = 100, help_heading = "NTS",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub nts_ke_max_connections: u32,

    /// How long one key exchange may take, TLS handshake included.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration,
          help_heading = "NTS")]
    pub nts_ke_timeout: Duration,
}

/// A rotation interval: whole seconds, at least one.
fn parse_rotation(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration < Duration::from_secs(1) || duration.subsec_nanos() != 0 {
        return Err(format!(
            "'{text}' is not a whole number of seconds (1s at least): the cookie key's periods are whole seconds"
        ));
    }
    Ok(duration)
}

/// The NTPv4 server named to clients: a host name in ASCII (an IDN as its A-label,
/// `xn--...`) or an IP address, as RFC 8915 §4.1.7 requires, of at most 253 bytes.
fn parse_ntp_server(text: &str) -> Result<String, String> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_');
    if text.is_empty() || text.len() > 253 || !text.bytes().all(allowed) {
        return Err(format!(
            "'{text}' is not a host name or IP address in ASCII (letters, digits, '.', '-', \
             ':' and '_'; an internationalised name as its xn-- form; 253 bytes at most)"
        ));
    }
    Ok(text.to_string())
}

/// A duration: seconds (`2`, `0.5`) or a number with a unit (`500ms`, `5s`, `1m`),
/// the toolkit's one syntax.
fn parse_duration(text: &str) -> Result<Duration, String> {
    duration_arg::parse(text).map_err(|e| e.to_string())
}
