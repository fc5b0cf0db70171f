//! Building the [`Live`] settings from a configuration, at startup and on SIGHUP, and
//! reopening the access log on SIGUSR1.
//!
//! A reload re-reads the configuration (the command line and the file it names), builds
//! a complete new set (the root opened, the access log opened, a new open-file cache)
//! and only then swaps it in: new requests use it, requests in flight finish with the
//! set they started with, no listener closes. The `--auth-file` is read again too: a
//! file that is now refused keeps the old set, as any other error does; so are the TLS
//! certificate and key, for new connections (one in flight keeps its session). Anything that fails leaves the old set in
//! place and is logged. Settings that belong to the process (listeners, workers,
//! runtime, metrics address, connection limit) need a restart, as their declarations
//! in [`crate::ops::config`] say; a reload that changes them says so and keeps them.

use std::sync::Arc;

use tracing_appender::non_blocking::WorkerGuard;

use crate::http::auth::Auth;
use crate::http::site::{CacheSettings, Site};
use crate::io::file_digests::FileDigests;
use crate::io::pacing::PaceLimits;
use crate::io::root::{Resolver, Root};
use crate::io::strategy::{Strategy, StrategyKind};
use crate::ops::access_log::AccessLog;
use crate::ops::budget;
use crate::ops::config::{Config, OnReload};
use crate::ops::memory;
use crate::serve::error::ServerError;
use crate::serve::shared::{Limits, Live};
use crate::serve::tls::{self, AcmeTls, TlsSetup};

/// A built set of settings and the guard that flushes its access log.
pub(crate) struct Built {
    /// The settings.
    pub live: Live,
    /// Flushes the access log's writer when dropped.
    pub guard: Option<WorkerGuard>,
    /// The descriptor budget it was built with (its cache size, the connection limit).
    pub fitted: budget::Fitted,
}

/// Builds the settings of `config` for a process with this many descriptors allowed,
/// whose ACME certificate (if it has one: it belongs to the process) `acme` presents;
/// on a reload, `previous` is the site in force, whose open files are kept where the
/// tree and the cache's settings are unchanged ([`Site::keeping_files_of`]).
pub(crate) fn build(
    config: &Config,
    descriptor_limit: u64,
    acme: Option<&Arc<AcmeTls>>,
    previous: Option<&Site>,
) -> Result<Built, ServerError> {
    let root =
        Root::open(&config.root, config.follow_symlinks).map_err(|source| ServerError::Root {
            path: config.root.clone(),
            source,
        })?;
    match root.resolver() {
        Resolver::Openat2 => {
            tracing::info!(resolver = "openat2", "paths resolved beneath the root")
        }
        Resolver::Walk => tracing::warn!(
            resolver = "component walk",
            "openat2 is missing or refused (kernel before 5.6, or a seccomp profile): \
             paths are resolved one component at a time, with the same guarantees"
        ),
    }
    let fitted = fit(config, descriptor_limit);
    if let Some(warning) = &fitted.warning {
        tracing::warn!("{warning}");
    }
    let (access_log, guard) = match config.access_log {
        false => (None, None),
        true => {
            let (log, guard) = open_access_log(config)?;
            (Some(log), Some(guard))
        }
    };
    let site = Site::new(
        root,
        config.listing.then_some(config.listing_max_entries),
        config.hidden,
        CacheSettings {
            workers: config.workers,
            capacity: fitted.open_file_cache,
            validity: config.open_file_cache_valid,
            kept_bytes: config.small_file_cache,
        },
    )
    .with_precompressed(config.precompressed)
    .with_digests(match config.digests {
        true => Some(FileDigests::new().map_err(ServerError::Worker)?),
        false => None,
    });
    let site = match previous {
        Some(previous) => site.keeping_files_of(previous),
        None => site,
    };
    let auth = match &config.auth_file {
        Some(path) => Some(Arc::new(Auth::load(path, &config.auth_realm)?)),
        None => None,
    };
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(TlsSetup::Files(tls::load(cert, key)?)),
        (None, None) => acme.map(|acme| TlsSetup::Acme(Arc::clone(acme))),
        (Some(_), None) => {
            return Err(ServerError::TlsHalfPair {
                given: "--tls-cert",
                missing: "--tls-key",
            })
        }
        (None, Some(_)) => {
            return Err(ServerError::TlsHalfPair {
                given: "--tls-key",
                missing: "--tls-cert",
            })
        }
    };
    Ok(Built {
        live: Live {
            site: Arc::new(site),
            strategy: Arc::new(Strategy::new(
                config.strategy,
                config.chunk_size,
                config.cold_reads,
                config.cold_threads,
            )),
            limits: Limits {
                header_timeout: config.header_timeout,
                idle_timeout: config.idle_timeout,
                send_timeout: config.send_timeout,
                pace: PaceLimits {
                    rate: config.limit_rate,
                    after: config.limit_rate_after,
                },
                max_conns_per_ip: config.max_conns_per_ip,
            },
            access_log,
            auth,
            tls,
            hsts: config.hsts,
        },
        guard,
        fitted,
    })
}

/// The descriptor budget of `config` (see [`budget::fit`]), then the memory budget
/// where a cgroup limits the process's memory (see [`memory`]).
fn fit(config: &Config, descriptor_limit: u64) -> budget::Fitted {
    let mut fitted = budget::fit(
        descriptor_limit,
        config.workers,
        config.max_connections,
        1 + config.strategy.descriptors_per_download(),
        config.open_file_cache,
    );
    let Some(limit) = memory::limit() else {
        return fitted;
    };
    let kind = match config.tls() {
        true => "HTTPS",
        false => "HTTP",
    };
    let reads_into_memory = matches!(config.strategy, StrategyKind::Read | StrategyKind::Buffered);
    let each = memory::connection_bytes(config.tls(), reads_into_memory, config.chunk_size);
    let held = memory::connections_within(&limit, each);
    if held < fitted.max_connections {
        let said = format!(
            "the memory limit is {} MiB ({}): after {} MiB for the process and about {} KiB \
             per {kind} connection, at most {held} connections are admitted, more get 503 \
             with Retry-After (raise MemoryMax= in the unit to admit more)",
            limit.bytes >> 20,
            limit.source.display(),
            memory::reserve(&limit) >> 20,
            each >> 10,
        );
        fitted.max_connections = held;
        fitted.warning = Some(match fitted.warning.take() {
            Some(descriptors) => format!("{descriptors}; {said}"),
            None => said,
        });
    }
    fitted
}

/// Opens the access log `config` names.
pub(crate) fn open_access_log(config: &Config) -> Result<(AccessLog, WorkerGuard), ServerError> {
    AccessLog::open(config.access_log_format, config.access_log_file.as_deref()).map_err(|source| {
        ServerError::AccessLog {
            path: config.access_log_file.clone().unwrap_or_default(),
            source,
        }
    })
}

/// The settings that differ between `old` and `new` but need a restart: those whose
/// declaration in [`crate::ops::config`] says [`OnReload::NeedsRestart`], by their keys.
pub(crate) fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    old.changed_settings(new)
        .into_iter()
        .filter(|setting| setting.on_reload == OnReload::NeedsRestart)
        .map(|setting| setting.key())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::config::{Declared, SETTINGS};
    use clap::Parser as _;

    fn config(args: &[&str]) -> Config {
        let dir = std::env::temp_dir();
        let mut argv = vec!["ioserve", dir.to_str().unwrap()];
        argv.extend_from_slice(args);
        Config::load(crate::ops::config::Settings::parse_from(argv)).unwrap()
    }

    #[test]
    fn process_settings_need_a_restart() {
        let old = config(&["--listen", "127.0.0.1:8080", "--workers", "2"]);
        let same = config(&["--listen", "127.0.0.1:8080", "--workers", "2", "--hidden"]);
        assert!(restart_only_changes(&old, &same).is_empty());
        let moved = config(&["--listen", "127.0.0.1:9090", "--workers", "4"]);
        assert_eq!(restart_only_changes(&old, &moved), ["listen", "workers"]);
    }

    #[test]
    fn the_declarations_say_which_settings_need_a_restart() {
        let restart: Vec<String> = SETTINGS
            .iter()
            .filter(|setting| setting.on_reload == OnReload::NeedsRestart)
            .map(Declared::key)
            .collect();
        assert_eq!(
            restart,
            [
                "listen",
                "reuse-port",
                "workers",
                "runtime",
                "pin",
                "numa",
                "numa-nodes",
                "send-buffer",
                "metrics-listen",
                "shutdown-timeout",
                "max-connections",
                "redirect-http",
                "ktls",
                "http3",
                "acme-domain",
                "acme-email",
                "acme-ca",
                "acme-ca-root",
                "acme-state",
                "acme-challenge",
                "acme-profile"
            ]
        );
        // A change to two of them is named, in declaration order.
        let old = config(&["--max-connections", "5"]);
        let new = config(&["--max-connections", "6", "--shutdown-timeout", "1s"]);
        assert_eq!(
            restart_only_changes(&old, &new),
            ["shutdown-timeout", "max-connections"]
        );
    }

    #[test]
    fn a_root_that_cannot_be_opened_is_refused() {
        let mut bad = config(&[]);
        bad.root = "/no/such/root".into();
        assert!(matches!(
            build(&bad, 1 << 20, None, None),
            Err(ServerError::Root { .. })
        ));
    }
}
