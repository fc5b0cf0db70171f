//! Configuration: command-line flags, an optional TOML file with the same keys, and the
//! defaults, merged in that order of precedence and validated into a [`Config`].
//!
//! Each setting is declared once, in the `settings!` table below: its help, flag, key,
//! default, allowed range and whether a reload may change it. The command line, the
//! TOML file, the man page and completions (from [`Settings`]), [`Config`] and the
//! reload diff ([`SETTINGS`], [`Config::changed_settings`]) all come from it.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use crate::acme::{self, AcmeSettings, ChallengeKind};
use crate::io::strategy::{ColdReads, StrategyKind};
pub use crate::ops::access_log::Format as AccessLogFormat;
use crate::ops::placement::{self, PlacementError, WorkerPlace};

/// Smallest and largest `--chunk-size`.
const CHUNK_SIZE_RANGE: (u64, u64) = (4 * 1024, 64 * 1024 * 1024);

/// Largest `--small-file-cache`.
const SMALL_FILE_CACHE_MAX: u64 = 1024 * 1024 * 1024;

/// Smallest and largest `--send-buffer` (the kernel's SO_SNDBUF takes an int).
const SEND_BUFFER_RANGE: (u64, u64) = (4 * 1024, 1024 * 1024 * 1024);

/// Why a configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these keys.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line and the key.
        message: String,
    },
    /// A value is out of its allowed range.
    #[error("invalid {key} {value}: {allowed}")]
    Invalid {
        /// The flag or key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// `--numa` cannot place the workers on this host.
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// Whether SIGHUP may change a setting of a running server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnReload {
    /// A reload applies it: new requests are served with the new value.
    Applied,
    /// It belongs to the process (listeners, workers, metrics address, ...): a reload
    /// keeps the old value and logs that it needs a restart.
    NeedsRestart,
}

/// One setting as `settings!` declares it: [`SETTINGS`] lists them all, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared {
    /// The field of [`Settings`] (`metrics_listen`).
    pub field: &'static str,
    /// Whether SIGHUP may change it.
    pub on_reload: OnReload,
}

impl Declared {
    /// The flag without its dashes and the config file's key (`metrics-listen`).
    pub fn key(&self) -> String {
        self.field.replace('_', "-")
    }
}

/// Declares every setting once and derives from that the command line and the TOML
/// file ([`Settings`], whose clap definition also makes the man page and the
/// completions), their merge ([`Settings::or`]), the validated [`Config`] with its
/// defaults and checks, and the table of settings ([`SETTINGS`]) with the reload diff
/// ([`Config::changed_settings`]).
///
/// Each setting reads:
///
/// ```text
/// /// Help text (also the doc of the Config field)
/// #[arg(clap's attributes)]
/// name: InputType, OnReload => config_field: ConfigType = resolving expression;
/// ```
///
/// `name` is the `Settings` field (`Option<InputType>`), the long flag and the TOML key
/// in kebab-case. The expression gives the `Config` field from `given` (the merged
/// [`Settings`]) and `host` (the [`Host`]); it applies the default and the allowed
/// range, and may return an error with `?`.
macro_rules! settings {
    (
        $(#[$settings_attr:meta])*
        resolved with ($given:ident, $host:ident) {
            $(
                $(#[doc = $doc:literal])*
                #[arg($($arg:tt)*)]
                $name:ident: $input:ty, $on_reload:ident => $field:ident: $resolved:ty = $resolve:expr;
            )*
        }
    ) => {
        /// Every setting as it may come from the command line or the config file; unset
        /// ones are `None`.
        $(#[$settings_attr])*
        pub struct Settings {
            $(
                $(#[doc = $doc])*
                #[arg($($arg)*)]
                pub $name: Option<$input>,
            )*
            /// Read settings from this TOML file; flags given on the command line win
            #[arg(long, value_name = "FILE")]
            #[serde(skip)]
            pub config: Option<PathBuf>,
            /// Check the configuration (the settings, the root, the TLS files, the ACME
            /// state) and print what would be served, as `nginx -t` does; exit 0 when it
            /// can serve, 1 when not
            #[arg(long)]
            #[serde(skip)]
            pub check_config: bool,
        }

        /// Every declared setting, in the order of `--help`.
        pub const SETTINGS: &[Declared] = &[
            $(Declared { field: stringify!($name), on_reload: OnReload::$on_reload },)*
        ];

        /// The validated configuration of a server.
        #[derive(Clone, Debug)]
        pub struct Config {
            $(
                $(#[doc = $doc])*
                pub $field: $resolved,
            )*
        }

        impl Settings {
            /// Each setting from `self`, else from `fallback`.
            fn or(self, fallback: Settings) -> Settings {
                Settings {
                    $($name: self.$name.or(fallback.$name),)*
                    config: self.config,
                    check_config: self.check_config,
                }
            }
        }

        impl Config {
            /// Applies each setting's default and checks its range.
            fn resolve($given: &Settings, $host: &Host) -> Result<Config, ConfigError> {
                Ok(Config {
                    $($field: $resolve,)*
                })
            }

            /// The declared settings whose values differ between `self` and `new`.
            pub fn changed_settings(&self, new: &Config) -> Vec<&'static Declared> {
                let differs = [$(self.$field != new.$field),*];
                SETTINGS
                    .iter()
                    .zip(differs)
                    .filter_map(|(setting, differs)| differs.then_some(setting))
                    .collect()
            }
        }
    };
}

settings! {
    #[derive(Clone, Debug, Default, Parser, Deserialize)]
    #[command(
        name = "ioserve",
        version = crate::VERSION,
        about = "Serve a directory for large downloads over HTTP/1.1, and with TLS HTTP/2 and HTTP/3: ranges, conditional requests, zero-copy IO.",
        after_help = "IO strategies (--strategy):\n  \
            sendfile  sendfile(2) from the page cache to the socket; no copy through user space (default)\n  \
            mmap      map the file and write(2) from the mapping; the kernel copies once, no read(2)\n  \
            read      pread(2) into reused page-aligned buffers of --chunk-size, then write(2)\n  \
            buffered  tokio::fs with a buffered reader on the blocking pool; the plain async baseline\n\n\
            Durations take a unit (500ms, 10s, 2m) or are seconds; sizes take K/M/G (binary) or are bytes.\n\
            The config file (TOML) takes the long flag names as keys, e.g. strategy = \"mmap\"."
    )]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    resolved with (given, host) {
        /// Directory to serve [default: the current directory]
        #[arg(value_name = "ROOT")]
        root: PathBuf, Applied
            => root: PathBuf = given.root.clone().unwrap_or_else(|| PathBuf::from("."));
        /// Address to listen on [default: 127.0.0.1:8080]
        #[arg(long, value_name = "ADDR")]
        listen: SocketAddr, NeedsRestart
            => listen: SocketAddr = given.listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080)));
        /// Let other processes listen on the same address (SO_REUSEPORT across processes,
        /// as nginx's `listen ... reuseport`): replicas on one host share the connections
        /// (and the --redirect-http listener); without it a second server on the address
        /// is refused [default: false]
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        reuse_port: bool, NeedsRestart => reuse_port: bool = given.reuse_port.unwrap_or(false);
        /// How file bytes reach the socket (see below) [default: sendfile]
        #[arg(long, value_enum)]
        strategy: StrategyKind, Applied
            => strategy: StrategyKind = given.strategy.unwrap_or(StrategyKind::Sendfile);
        /// Worker threads, each with its own SO_REUSEPORT listener [default: one per CPU]
        #[arg(long, value_name = "N")]
        workers: usize, NeedsRestart => workers: usize = within(
            "--workers",
            host.numa.as_ref().map_or(given.workers.unwrap_or(host.cpus), Vec::len),
            1..=1024,
            "allowed: 1 to 1024",
        )?;
        /// per-core: one current-thread runtime per worker, each with its own SO_REUSEPORT
        /// listener; multi: one work-stealing runtime with one listener [default: per-core]
        #[arg(long, value_enum)]
        runtime: RuntimeKind, NeedsRestart
            => runtime: RuntimeKind = given.runtime.unwrap_or(RuntimeKind::PerCore);
        /// Pin worker i to the i-th CPU this process may run on (with --numa: each worker to
        /// its own CPU of its node)
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        pin: bool, NeedsRestart => pin: bool = given.pin.unwrap_or(false);
        /// One group of workers per NUMA node: a worker per CPU, each restricted to its
        /// node's CPUs and preferring its node's memory (needs two or more nodes;
        /// `--numa=false` turns off a config file's `numa = true`)
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_name = "BOOL")]
        numa: bool, NeedsRestart => numa: Option<Vec<WorkerPlace>> = host.numa.clone();
        /// Only these nodes for --numa (implies it), in numactl's grammar: 0,2 1-3 !0 all
        #[arg(long, value_name = "NODES")]
        numa_nodes: String, NeedsRestart
            => numa_nodes: Option<String> = given.numa_nodes.clone();
        /// Open files kept per worker for reuse, 0 to disable [default: 1024]
        #[arg(long, value_name = "N")]
        open_file_cache: usize, Applied
            => open_file_cache: usize = given.open_file_cache.unwrap_or(1024);
        /// How long a cached open file's path is trusted before it is resolved again
        /// [default: 1s]
        #[arg(long, value_name = "DURATION")]
        open_file_cache_valid: Seconds, Applied => open_file_cache_valid: Duration =
            given.open_file_cache_valid.map_or(Duration::from_secs(1), |s| s.0);
        /// Memory for the bytes of the open-file cache's small files (16 KiB or less),
        /// all workers together: the sendfile strategy sends them from memory instead of
        /// reading the file for each request; 0 to 1G, 0 turns it off [default: 16M]
        #[arg(long, value_name = "SIZE")]
        small_file_cache: ByteSize, Applied => small_file_cache: usize = within(
            "--small-file-cache",
            given.small_file_cache.map_or(16 * 1024 * 1024, |s| s.0),
            0..=SMALL_FILE_CACHE_MAX,
            "allowed: 0 to 1G",
        )? as usize;
        /// Read buffer size of the read and buffered strategies [default: 128K]
        #[arg(long, value_name = "SIZE")]
        chunk_size: ByteSize, Applied => chunk_size: usize = within(
            "--chunk-size",
            given.chunk_size.map_or(128 * 1024, |s| s.0),
            CHUNK_SIZE_RANGE.0..=CHUNK_SIZE_RANGE.1,
            "allowed: 4K to 64M",
        )? as usize;
        /// Send buffer of every connection (SO_SNDBUF on the listeners, as nginx's `listen
        /// ... sndbuf=`): the kernel doubles it, caps it at net.core.wmem_max and stops
        /// autotuning it; a client that reads slowly can hold twice this much page cache in
        /// its socket; 4K to 1G [default: the kernel's autotuning, up to tcp_wmem's maximum]
        #[arg(long, value_name = "SIZE")]
        send_buffer: ByteSize, NeedsRestart => send_buffer: Option<usize> = given
            .send_buffer
            .map(|size| within(
                "--send-buffer",
                size.0,
                SEND_BUFFER_RANGE.0..=SEND_BUFFER_RANGE.1,
                "allowed: 4K to 1G",
            ))
            .transpose()?
            .map(|size| size as usize);
        /// Where file data that is not in the page cache is waited for: pool (read ahead on
        /// a thread pool, as nginx's `aio threads`; the event loop never waits for the disk)
        /// or inline (on the worker thread) [default: pool]
        #[arg(long, value_enum, value_name = "WHERE")]
        cold_reads: ColdReads, Applied
            => cold_reads: ColdReads = given.cold_reads.unwrap_or_default();
        /// With --cold-reads pool, how many pool threads work on cold ranges at once, for
        /// each kind: windows read into the page cache, and sendfile(2) calls into sockets;
        /// 1 to 1024 [default: half the CPUs, at least 1]
        #[arg(long, value_name = "N")]
        cold_threads: usize, Applied => cold_threads: usize = within(
            "--cold-threads",
            given.cold_threads.unwrap_or((host.cpus / 2).max(1)),
            1..=1024,
            "allowed: 1 to 1024",
        )?;
        /// Serve Prometheus metrics at http://ADDR/metrics [default: off]
        #[arg(long, value_name = "ADDR")]
        metrics_listen: SocketAddr, NeedsRestart
            => metrics_listen: Option<SocketAddr> = given.metrics_listen;
        /// One log line per request: on or off [default: on]
        #[arg(long, value_name = "on|off", value_parser = parse_switch)]
        access_log: bool, Applied => access_log: bool = given.access_log.unwrap_or(true);
        /// Layout of access-log lines: combined (nginx's, for GoAccess, fail2ban, AWStats) or
        /// json [default: combined]
        #[arg(long, value_enum, value_name = "FORMAT")]
        access_log_format: AccessLogFormat, Applied
            => access_log_format: AccessLogFormat = given.access_log_format.unwrap_or_default();
        /// Append the access log to this file instead of stderr
        #[arg(long, value_name = "PATH")]
        access_log_file: PathBuf, Applied
            => access_log_file: Option<PathBuf> = given.access_log_file.clone();
        /// Time allowed for a complete request head [default: 10s]
        #[arg(long, value_name = "DURATION")]
        header_timeout: Seconds, Applied => header_timeout: Duration =
            positive("--header-timeout", given.header_timeout, Duration::from_secs(10))?;
        /// Time a keep-alive connection may wait for its next request [default: 60s]
        #[arg(long, value_name = "DURATION")]
        idle_timeout: Seconds, Applied => idle_timeout: Duration =
            positive("--idle-timeout", given.idle_timeout, Duration::from_secs(60))?;
        /// Time a client may leave the socket unread before it is cut off [default: 60s]
        #[arg(long, value_name = "DURATION")]
        send_timeout: Seconds, Applied => send_timeout: Duration =
            positive("--send-timeout", given.send_timeout, Duration::from_secs(60))?;
        /// On SIGTERM/SIGINT, time given to downloads in flight [default: 30s]
        #[arg(long, value_name = "DURATION")]
        shutdown_timeout: Seconds, NeedsRestart => shutdown_timeout: Duration =
            positive("--shutdown-timeout", given.shutdown_timeout, Duration::from_secs(30))?;
        /// Most connections open at once; more get 503 [default: 10000]
        #[arg(long, value_name = "N")]
        max_connections: usize, NeedsRestart => max_connections: usize = within(
            "--max-connections",
            given.max_connections.unwrap_or(10_000),
            1..=usize::MAX,
            "must be at least 1",
        )?;
        /// Follow symlinks that point outside ROOT [default: refused]
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        follow_symlinks: bool, Applied
            => follow_symlinks: bool = given.follow_symlinks.unwrap_or(false);
        /// Answer 403 for directories without index.html instead of listing them
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        no_listing: bool, Applied => listing: bool = !given.no_listing.unwrap_or(false);
        /// Most entries a directory listing shows; a line says how many more there are
        /// [default: 10000]
        #[arg(long, value_name = "N")]
        listing_max_entries: usize, Applied => listing_max_entries: usize = within(
            "--listing-max-entries",
            given.listing_max_entries.unwrap_or(10_000),
            1..=10_000_000,
            "allowed: 1 to 10000000",
        )?;
        /// Serve and list hidden files: paths with a segment starting with '.' (.env,
        /// .git/); by default they are 404 and not listed, except /.well-known/
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        hidden: bool, Applied => hidden: bool = given.hidden.unwrap_or(false);
        /// Serve NAME.br or NAME.gz beside NAME to clients whose Accept-Encoding allows it
        /// (Content-Encoding, Vary: Accept-Encoding), as nginx's gzip_static does
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_name = "BOOL")]
        precompressed: bool, Applied
            => precompressed: bool = given.precompressed.unwrap_or(false);
        /// Answer Want-Repr-Digest and Want-Content-Digest (RFC 9530: sha-256, sha-512)
        /// with digests of whole files, computed off the event loop once per file
        /// version, cached, kept in user.ioserve.* xattrs [default: true]
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_name = "BOOL")]
        digests: bool, Applied => digests: bool = given.digests.unwrap_or(true);
        /// Ask every request for HTTP Basic credentials checked against this file in
        /// Apache's htpasswd format: bcrypt (htpasswd -B) or SHA-crypt (htpasswd -2, -5)
        /// entries; re-read on SIGHUP [default: off]
        #[arg(long, value_name = "PATH")]
        auth_file: PathBuf, Applied => auth_file: Option<PathBuf> = given.auth_file.clone();
        /// The realm a 401 answer names to the client: printable ASCII without '"' or a
        /// backslash [default: ioserve]
        #[arg(long, value_name = "TEXT")]
        auth_realm: String, Applied => auth_realm: String = realm(given.auth_realm.as_deref())?;
        /// Most body bytes per second each connection is sent, as RATE bytes (K, M, G:
        /// binary multiples), 0 for no limit, as nginx's limit_rate [default: 0]
        #[arg(long, value_name = "RATE")]
        limit_rate: ByteSize, Applied => limit_rate: u64 = within(
            "--limit-rate",
            given.limit_rate.map_or(0, |s| s.0),
            0..=1 << 40,
            "allowed: 0 (no limit) to 1024G per second",
        )?;
        /// With --limit-rate, the first SIZE body bytes of a connection go at full speed
        /// [default: 0]
        #[arg(long, value_name = "SIZE")]
        limit_rate_after: ByteSize, Applied
            => limit_rate_after: u64 = given.limit_rate_after.map_or(0, |s| s.0);
        /// Most connections open at once from one client address (IPv6: the full
        /// address); more get 503 with Retry-After, as nginx's limit_conn; 0 for no limit
        /// [default: 0]
        #[arg(long, value_name = "N")]
        max_conns_per_ip: usize, Applied
            => max_conns_per_ip: usize = given.max_conns_per_ip.unwrap_or(0);
        /// Serve HTTPS on the listeners with this PEM certificate chain (the server's
        /// certificate first, then its intermediates); needs --tls-key; re-read on SIGHUP
        /// [default: off]
        #[arg(long, value_name = "PATH")]
        tls_cert: PathBuf, Applied => tls_cert: Option<PathBuf> = given.tls_cert.clone();
        /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1); re-read on SIGHUP
        #[arg(long, value_name = "PATH")]
        tls_key: PathBuf, Applied => tls_key: Option<PathBuf> = given.tls_key.clone();
        /// With TLS, send Strict-Transport-Security: max-age=SECONDS on HTTPS responses
        /// [default: off]
        #[arg(long, value_name = "SECONDS")]
        hsts: u64, Applied => hsts: Option<u64> = given.hsts;
        /// With TLS, also listen on ADDR for plain HTTP and answer every request with 308 to
        /// its https:// URL [default: off]
        #[arg(long, value_name = "ADDR")]
        redirect_http: SocketAddr, NeedsRestart
            => redirect_http: Option<SocketAddr> = given.redirect_http;
        /// With TLS, hand each connection's keys to the kernel after the handshake (kTLS),
        /// so that sendfile and mmap stay zero-copy: auto (where the kernel has the `tls`
        /// module and the negotiated cipher; else TLS in user space, the log says why),
        /// on (refuse to start without kTLS) or off [default: auto]
        #[arg(long, value_enum, value_name = "WHEN")]
        ktls: KtlsSetting, NeedsRestart
            => ktls: KtlsSetting = given.ktls.unwrap_or(KtlsSetting::Auto);
        /// With TLS, also serve HTTP/3 (QUIC) on UDP at the listener's address and port, with
        /// the same certificate, and advertise it to HTTP/1.1 and HTTP/2 clients with
        /// Alt-Svc; `--http3=false` serves TCP only [default: true with TLS]
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
              value_name = "BOOL")]
        http3: bool, NeedsRestart => http3: Option<bool> = http3(given)?;
        /// Serve HTTPS with a certificate for NAME that ioserve gets and renews itself from
        /// an ACME CA (Let's Encrypt unless --acme-ca says), instead of --tls-cert and
        /// --tls-key; repeat it for more names on the same certificate [default: off]
        #[arg(long, value_name = "NAME")]
        acme_domain: Vec<String>, NeedsRestart
            => acme_domains: Vec<String> = acme_domains(given)?;
        /// Contact address the CA is given, for its notices [default: none]
        #[arg(long, value_name = "ADDR")]
        acme_email: String, NeedsRestart => acme_email: Option<String> = given
            .acme_email
            .as_deref()
            .map(|address| checked("--acme-email", address, acme::settings::email))
            .transpose()?;
        /// The ACME directory URL of the CA [default: Let's Encrypt's,
        /// https://acme-v02.api.letsencrypt.org/directory]
        #[arg(long, value_name = "URL")]
        acme_ca: String, NeedsRestart => acme_ca: String = checked(
            "--acme-ca",
            given.acme_ca.as_deref().unwrap_or(acme::settings::LETS_ENCRYPT),
            acme::settings::directory,
        )?;
        /// A PEM file of root certificates to trust for the CA's own HTTPS, beside the
        /// system's (a private or test CA) [default: none]
        #[arg(long, value_name = "PEM")]
        acme_ca_root: PathBuf, NeedsRestart
            => acme_ca_root: Option<PathBuf> = given.acme_ca_root.clone();
        /// Where the ACME account, certificates, locks and challenge answers are kept
        /// (0700); replicas behind one address may share it [default: /var/lib/ioserve/acme]
        #[arg(long, value_name = "DIR")]
        acme_state: PathBuf, NeedsRestart => acme_state: PathBuf = given
            .acme_state
            .clone()
            .unwrap_or_else(|| acme::settings::DEFAULT_STATE_DIR.into());
        /// How the CA checks that this server answers for the names: tls-alpn-01 on the TLS
        /// listener (port 443) or http-01 on the --redirect-http listener (port 80)
        /// [default: tls-alpn-01]
        #[arg(long, value_enum, value_name = "CHALLENGE")]
        acme_challenge: ChallengeKind, NeedsRestart
            => acme_challenge: ChallengeKind = acme_challenge(given)?;
        /// The CA's certificate profile to ask for (the ACME profiles extension), e.g.
        /// shortlived for Let's Encrypt's 6-day certificates [default: the CA's default]
        #[arg(long, value_name = "NAME")]
        acme_profile: String, NeedsRestart => acme_profile: Option<String> = given
            .acme_profile
            .as_deref()
            .map(|name| checked("--acme-profile", name, acme::settings::profile))
            .transpose()?;
    }
}

impl Config {
    /// Whether the listeners speak TLS: with a certificate from files, or from ACME.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() || !self.acme_domains.is_empty()
    }

    /// Whether HTTP/3 is served beside the TLS listener: `--http3`, by default where
    /// the listener speaks TLS.
    pub fn serves_http3(&self) -> bool {
        self.tls() && self.http3.unwrap_or(true)
    }

    /// The ACME settings, when `--acme-domain` names at least one name.
    pub fn acme(&self) -> Option<AcmeSettings> {
        (!self.acme_domains.is_empty()).then(|| AcmeSettings {
            domains: self.acme_domains.clone(),
            email: self.acme_email.clone(),
            directory: self.acme_ca.clone(),
            ca_root: self.acme_ca_root.clone(),
            state: self.acme_state.clone(),
            challenge: self.acme_challenge,
            profile: self.acme_profile.clone(),
        })
    }
}

/// `value` of `key` checked by `check`, or an error naming both and what is allowed.
fn checked(
    key: &'static str,
    value: &str,
    check: fn(&str) -> Result<String, String>,
) -> Result<String, ConfigError> {
    check(value)
        .map_err(|allowed| invalid(key, format!("{value:?}"), format!("allowed: {allowed}")))
}

/// The `--acme-domain` names, checked, lowercase, each once; refused beside a
/// certificate from files.
fn acme_domains(given: &Settings) -> Result<Vec<String>, ConfigError> {
    let mut names: Vec<String> = Vec::new();
    for name in given.acme_domain.iter().flatten() {
        let name = checked("--acme-domain", name, acme::settings::domain)?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if let (Some(first), true) = (
        names.first(),
        given.tls_cert.is_some() || given.tls_key.is_some(),
    ) {
        return Err(invalid(
            "--acme-domain",
            first,
            "not with --tls-cert or --tls-key: with --acme-domain ioserve gets the certificate \
             itself; serve either the files or ACME's certificate",
        ));
    }
    Ok(names)
}

/// `--http3` as given (unset: served where TLS is, see [`Config::http3`]); asked for
/// without TLS, refused (QUIC is always encrypted).
fn http3(given: &Settings) -> Result<Option<bool>, ConfigError> {
    let tls = given.tls_cert.is_some()
        || given
            .acme_domain
            .as_ref()
            .is_some_and(|names| !names.is_empty());
    match given.http3 {
        Some(true) if !tls => Err(invalid(
            "--http3",
            "true",
            "needs TLS (--tls-cert and --tls-key, or --acme-domain): QUIC is always encrypted",
        )),
        asked => Ok(asked),
    }
}

/// The challenge, refused where it cannot be answered: HTTP-01 needs the plain
/// listener.
fn acme_challenge(given: &Settings) -> Result<ChallengeKind, ConfigError> {
    let challenge = given.acme_challenge.unwrap_or_default();
    let acme = given
        .acme_domain
        .as_ref()
        .is_some_and(|names| !names.is_empty());
    if acme && challenge == ChallengeKind::Http01 && given.redirect_http.is_none() {
        return Err(invalid(
            "--acme-challenge",
            challenge.name(),
            "needs --redirect-http ADDR, the plain HTTP listener (port 80) where the CA \
             fetches the answer; or use tls-alpn-01 on the TLS listener",
        ));
    }
    Ok(challenge)
}

impl Config {
    /// Merges the command line with the config file it names (if any) and the defaults.
    pub fn load(cli: Settings) -> Result<Config, ConfigError> {
        let file = match &cli.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        cli.or(file).resolve()
    }
}

impl Settings {
    /// Reads a TOML config file.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// Applies defaults and checks ranges.
    fn resolve(self) -> Result<Config, ConfigError> {
        let host = Host::of(&self)?;
        Config::resolve(&self, &host)
    }
}

/// What defaults and checks read from this host: its CPUs and, with `--numa`, where
/// each worker runs.
struct Host {
    /// CPUs this process may run on.
    cpus: usize,
    /// With `--numa`, the workers' places (one per worker).
    numa: Option<Vec<WorkerPlace>>,
}

impl Host {
    /// This host, for the settings `given`.
    fn of(given: &Settings) -> Result<Host, ConfigError> {
        Ok(Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            numa: given.placement()?,
        })
    }
}

impl Settings {
    /// The workers' places with `--numa` (or `--numa-nodes`), read from this host.
    fn placement(&self) -> Result<Option<Vec<WorkerPlace>>, ConfigError> {
        let numa = self.numa.unwrap_or(self.numa_nodes.is_some());
        if !numa {
            return match &self.numa_nodes {
                Some(nodes) => Err(invalid(
                    "--numa-nodes",
                    nodes,
                    "only with --numa (it is off here)",
                )),
                None => Ok(None),
            };
        }
        if let Some(workers) = self.workers {
            return Err(invalid(
                "--workers",
                workers,
                "not with --numa, which runs one worker per CPU of its nodes (choose the \
                 nodes with --numa-nodes)",
            ));
        }
        if self.runtime == Some(RuntimeKind::Multi) {
            return Err(invalid(
                "--runtime",
                "multi",
                "per-core with --numa (each worker is its own runtime, placed on its node)",
            ));
        }
        Ok(Some(placement::plan_here(self.numa_nodes.as_deref())?))
    }
}

/// Whether TLS connections are handed to the kernel after the handshake (`--ktls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum KtlsSetting {
    /// Where the kernel can: it has the `tls` module and takes the negotiated cipher;
    /// otherwise rustls encrypts in user space.
    Auto,
    /// Always: the server refuses to start where the kernel has no kTLS.
    On,
    /// Never: rustls encrypts every record in user space; the kernel is not asked.
    Off,
}

/// How worker threads run connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// One current-thread tokio runtime per worker thread, each with its own
    /// SO_REUSEPORT listener: a connection never leaves its thread.
    PerCore,
    /// One multi-thread (work-stealing) tokio runtime with `--workers` threads and one
    /// listener.
    Multi,
}

/// `value` when `allowed` holds it, else an error naming `key` and `allowed_words`.
fn within<T: PartialOrd + fmt::Display>(
    key: &'static str,
    value: T,
    allowed: std::ops::RangeInclusive<T>,
    allowed_words: &str,
) -> Result<T, ConfigError> {
    if allowed.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(key, value, allowed_words))
    }
}

/// The `--auth-realm` `value` or `ioserve`: a quoted string of the `WWW-Authenticate`
/// field, so printable ASCII without `"` or a backslash.
fn realm(value: Option<&str>) -> Result<String, ConfigError> {
    let realm = value.unwrap_or("ioserve");
    let printable = |c: char| c.is_ascii_graphic() || c == ' ';
    if realm.is_empty() || !realm.chars().all(|c| printable(c) && c != '"' && c != '\\') {
        return Err(invalid(
            "--auth-realm",
            format!("{realm:?}"),
            "allowed: printable ASCII without '\"' or a backslash, not empty",
        ));
    }
    Ok(realm.to_owned())
}

/// The duration `value` or `default`, refused when zero.
fn positive(
    key: &'static str,
    value: Option<Seconds>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let duration = value.map_or(default, |s| s.0);
    if duration.is_zero() {
        Err(invalid(key, "0", "must be more than zero"))
    } else {
        Ok(duration)
    }
}

fn invalid(key: &'static str, value: impl fmt::Display, allowed: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

fn parse_switch(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("'{text}' is not a switch; use on or off")),
    }
}

/// A duration given as seconds (`10`, `0.5`) or with a unit (`500ms`, `10s`, `2m`,
/// `1h`): the toolkit's one duration syntax ([`duration_arg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        duration_arg::parse(text)
            .map(Seconds)
            .map_err(|e| e.to_string())
    }
}

/// A size given as `4096`, `128K`, `1M`, `1G` (binary multiples; `KiB`, `MB` etc. too),
/// read by [`parse_size`] with K, M and G as powers of 1024.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let error = || format!("'{text}' is not a size; use e.g. 65536, 128K, 1M (units: K, M, G)");
        // parse-size also knows T, P and E; sizes here stop at G.
        let unit = text
            .trim_end_matches(['b', 'B'])
            .trim_end_matches(['i', 'I']);
        if unit.ends_with(['t', 'T', 'p', 'P', 'e', 'E']) {
            return Err(error());
        }
        match parse_size::Config::new().with_binary().parse_size(text) {
            Ok(bytes) => Ok(ByteSize(bytes)),
            Err(parse_size::Error::PosOverflow) => Err(format!("'{text}' is too large")),
            Err(_) => Err(error()),
        }
    }
}

/// Both types come from TOML as a string ("10s", "128K") or a bare integer.
macro_rules! deserialize_from_str_or_int {
    ($ty:ty) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Raw {
                    Int(u64),
                    Text(String),
                }
                let text = match Raw::deserialize(d)? {
                    Raw::Int(n) => n.to_string(),
                    Raw::Text(t) => t,
                };
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
deserialize_from_str_or_int!(Seconds);
deserialize_from_str_or_int!(ByteSize);

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn units() {
        assert_eq!("500ms".parse(), Ok(Seconds(Duration::from_millis(500))));
        assert_eq!("10".parse(), Ok(Seconds(Duration::from_secs(10))));
        assert_eq!("2m".parse(), Ok(Seconds(Duration::from_secs(120))));
        assert!("ten".parse::<Seconds>().is_err());
        assert!("10x".parse::<Seconds>().is_err());
        assert_eq!("0.5".parse(), Ok(Seconds(Duration::from_millis(500))));
        assert_eq!("128K".parse(), Ok(ByteSize(128 * 1024)));
        assert_eq!("1MiB".parse(), Ok(ByteSize(1 << 20)));
        assert_eq!("4096".parse(), Ok(ByteSize(4096)));
        assert!("1T".parse::<ByteSize>().is_err());
        assert!("99999999999G".parse::<ByteSize>().is_err());
    }

    #[test]
    fn sizes_take_binary_units_up_to_g() {
        for (text, bytes) in [
            ("64k", 64 << 10),
            ("64 KB", 64 << 10),
            ("1mb", 1 << 20),
            ("2G", 2 << 30),
            ("3GiB", 3 << 30),
            ("512b", 512),
        ] {
            assert_eq!(text.parse(), Ok(ByteSize(bytes)), "{text}");
        }
        for text in ["", "K", "1PiB", "1e", "1 TB", "12X"] {
            let error = text.parse::<ByteSize>().unwrap_err();
            assert!(
                error.contains(&format!("'{text}'")) && error.contains("units: K, M, G"),
                "{text}: {error}"
            );
        }
        assert_eq!(
            "99999999999G".parse::<ByteSize>(),
            Err("'99999999999G' is too large".to_string())
        );
    }

    /// A value other than the default for each declared setting, as a flag's value and as
    /// a TOML value. A new setting needs its line here.
    const SAMPLES: &[(&str, &str, &str)] = &[
        ("root", "/srv", "\"/srv\""),
        ("listen", "127.0.0.1:9999", "\"127.0.0.1:9999\""),
        ("reuse-port", "true", "true"),
        ("strategy", "mmap", "\"mmap\""),
        ("workers", "1023", "1023"),
        ("runtime", "multi", "\"multi\""),
        ("pin", "true", "true"),
        ("numa", "true", "true"),
        ("numa-nodes", "0", "\"0\""),
        ("open-file-cache", "7", "7"),
        ("open-file-cache-valid", "5s", "\"5s\""),
        ("small-file-cache", "1M", "\"1M\""),
        ("chunk-size", "1M", "\"1M\""),
        ("send-buffer", "4M", "\"4M\""),
        ("cold-reads", "inline", "\"inline\""),
        ("cold-threads", "1023", "1023"),
        ("metrics-listen", "127.0.0.1:9998", "\"127.0.0.1:9998\""),
        ("access-log", "off", "false"),
        ("access-log-format", "json", "\"json\""),
        ("access-log-file", "/var/log/x.log", "\"/var/log/x.log\""),
        ("header-timeout", "5s", "\"5s\""),
        ("idle-timeout", "5s", "5"),
        ("send-timeout", "5s", "\"5s\""),
        ("shutdown-timeout", "5s", "\"5s\""),
        ("max-connections", "77", "77"),
        ("follow-symlinks", "true", "true"),
        ("no-listing", "true", "true"),
        ("listing-max-entries", "9", "9"),
        ("hidden", "true", "true"),
        ("precompressed", "true", "true"),
        ("digests", "false", "false"),
        (
            "auth-file",
            "/etc/ioserve/htpasswd",
            "\"/etc/ioserve/htpasswd\"",
        ),
        ("auth-realm", "downloads", "\"downloads\""),
        ("limit-rate", "512k", "\"512k\""),
        ("limit-rate-after", "1M", "1048576"),
        ("max-conns-per-ip", "4", "4"),
        (
            "tls-cert",
            "/etc/ioserve/cert.pem",
            "\"/etc/ioserve/cert.pem\"",
        ),
        (
            "tls-key",
            "/etc/ioserve/key.pem",
            "\"/etc/ioserve/key.pem\"",
        ),
        ("hsts", "31536000", "31536000"),
        ("redirect-http", "127.0.0.1:9997", "\"127.0.0.1:9997\""),
        ("ktls", "off", "\"off\""),
        ("http3", "false", "false"),
        ("acme-domain", "example.org", "[\"example.org\"]"),
        ("acme-email", "admin@example.org", "\"admin@example.org\""),
        (
            "acme-ca",
            "https://acme-staging-v02.api.letsencrypt.org/directory",
            "\"https://acme-staging-v02.api.letsencrypt.org/directory\"",
        ),
        (
            "acme-ca-root",
            "/etc/ioserve/ca.pem",
            "\"/etc/ioserve/ca.pem\"",
        ),
        ("acme-state", "/srv/acme", "\"/srv/acme\""),
        ("acme-challenge", "http-01", "\"http-01\""),
        ("acme-profile", "shortlived", "\"shortlived\""),
    ];

    #[test]
    fn every_declared_setting_reaches_the_cli_the_file_and_the_config() {
        let keys: Vec<String> = SETTINGS.iter().map(Declared::key).collect();
        let sampled: Vec<&str> = SAMPLES.iter().map(|(key, _, _)| *key).collect();
        assert_eq!(keys, sampled, "SAMPLES needs one line per declared setting");
        let command = Settings::command();
        let default = Settings::default().resolve().unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (setting, (key, flag_value, toml_value)) in SETTINGS.iter().zip(SAMPLES) {
            // The command line: a flag named after the key (ROOT is positional).
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_id() == setting.field)
                .unwrap_or_else(|| panic!("{key} is not on the command line"));
            let argv = if *key == "root" {
                assert!(arg.is_positional(), "{key}");
                vec!["ioserve".to_string(), flag_value.to_string()]
            } else {
                assert_eq!(arg.get_long(), Some(*key));
                vec!["ioserve".to_string(), format!("--{key}={flag_value}")]
            };
            assert!(arg.get_help().is_some(), "{key} has no help text");
            let cli = Settings::try_parse_from(argv).unwrap_or_else(|e| panic!("{key}: {e}"));
            // The config file: the same key.
            let path = dir.path().join(format!("{key}.toml"));
            std::fs::write(&path, format!("{key} = {toml_value}\n")).unwrap();
            let file = Settings::from_file(&path).unwrap_or_else(|e| panic!("{key}: {e}"));
            // Both reach Config, where the reload diff sees the change.
            let (from_cli, from_file) = match (cli.resolve(), file.resolve()) {
                (Ok(cli), Ok(file)) => (cli, file),
                // --numa on a host with one node: the declaration is checked above.
                (Err(ConfigError::Placement(_)), Err(ConfigError::Placement(_))) => continue,
                (cli, file) => panic!("{key}: {cli:?} {file:?}"),
            };
            assert_eq!(from_cli.changed_settings(&from_file), [] as [&Declared; 0]);
            let changed = default.changed_settings(&from_cli);
            assert!(changed.contains(&setting), "{key}: {changed:?}");
        }
    }

    #[test]
    fn the_readme_table_lists_every_setting() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        for setting in SETTINGS {
            let key = setting.key();
            if key == "root" {
                assert!(readme.contains("[ROOT]"), "README lacks ROOT");
            } else {
                let row = format!("| `--{key}");
                assert!(readme.contains(&row), "README's option table lacks --{key}");
            }
        }
    }

    #[test]
    fn defaults() {
        let config = Settings::default().resolve().unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.strategy, StrategyKind::Sendfile);
        assert_eq!(config.chunk_size, 128 * 1024);
        assert!(config.access_log && config.listing && !config.follow_symlinks);
        assert_eq!(config.root, PathBuf::from("."));
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(config.cold_threads, (cpus / 2).max(1));
    }

    #[test]
    fn cli_wins_over_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ioserve.toml");
        std::fs::write(
            &path,
            "strategy = \"mmap\"\nworkers = 3\nchunk-size = \"1M\"\nidle-timeout = 5\naccess-log = false\nno-listing = true\ncold-threads = 6\n",
        )
        .unwrap();
        let cli = Settings::try_parse_from([
            "ioserve",
            "--config",
            path.to_str().unwrap(),
            "--workers",
            "2",
            "/srv",
        ])
        .unwrap();
        let config = Config::load(cli).unwrap();
        assert_eq!(config.strategy, StrategyKind::Mmap);
        assert_eq!(config.workers, 2);
        assert_eq!(config.chunk_size, 1 << 20);
        assert_eq!(config.idle_timeout, Duration::from_secs(5));
        assert!(!config.access_log && !config.listing);
        assert_eq!(config.root, PathBuf::from("/srv"));
        assert_eq!(config.cold_threads, 6);
    }

    #[test]
    fn numa_combinations_are_checked_before_the_host() {
        let error = |args: &[&str]| {
            let mut argv = vec!["ioserve"];
            argv.extend(args);
            let settings = Settings::try_parse_from(argv).unwrap();
            settings.resolve().unwrap_err().to_string()
        };
        let workers = error(&["--numa", "--workers", "2"]);
        assert!(
            workers.starts_with("invalid --workers 2: not with --numa"),
            "{workers}"
        );
        let multi = error(&["--numa-nodes", "0", "--runtime", "multi"]);
        assert!(multi.starts_with("invalid --runtime multi"), "{multi}");
        let off = error(&["--numa=false", "--numa-nodes", "0"]);
        assert!(off.contains("only with --numa"), "{off}");
        // `--numa ROOT` is the flag and the root, not a value of --numa.
        let settings = Settings::try_parse_from(["ioserve", "--numa", "/srv"]).unwrap();
        assert_eq!(
            (settings.numa, settings.root),
            (Some(true), Some("/srv".into()))
        );
        let topology = ioserve_numa::Topology::system().unwrap();
        if topology.nodes.len() == 1 {
            let one = error(&["--numa"]);
            assert!(
                one.contains("this host has one NUMA node (node 0)"),
                "{one}"
            );
        }
    }

    #[test]
    fn bad_values_name_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "strategy = \"zerocopy\"\n").unwrap();
        let error = Settings::from_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("bad.toml") && error.contains("zerocopy"),
            "{error}"
        );

        std::fs::write(&path, "listen-on = \"x\"\n").unwrap();
        let error = Settings::from_file(&path).unwrap_err().to_string();
        assert!(error.contains("listen-on"), "{error}");

        let cli = Settings::try_parse_from(["ioserve", "--chunk-size", "1K"]).unwrap();
        let error = Config::load(cli).unwrap_err().to_string();
        assert_eq!(error, "invalid --chunk-size 1024: allowed: 4K to 64M");
        for threads in ["0", "1025"] {
            let cli = Settings::try_parse_from(["ioserve", "--cold-threads", threads]).unwrap();
            let error = Config::load(cli).unwrap_err().to_string();
            assert_eq!(
                error,
                format!("invalid --cold-threads {threads}: allowed: 1 to 1024")
            );
        }

        for realm in ["", "a\"b", "a\\b", "tab\there", "caf\u{e9}"] {
            let cli = Settings::try_parse_from(["ioserve", "--auth-realm", realm]).unwrap();
            let error = Config::load(cli).unwrap_err().to_string();
            assert!(
                error.starts_with("invalid --auth-realm") && error.contains("printable ASCII"),
                "{realm}: {error}"
            );
        }

        assert!(Settings::try_parse_from(["ioserve", "--strategy", "nope"]).is_err());
        assert!(Settings::try_parse_from(["ioserve", "--access-log", "maybe"]).is_err());
    }
}
