//! The `ioserve` binary: parse the configuration, set up logging, serve.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use ioserve::ops::config::{Config, Settings};
use ioserve::serve::server::Server;

/// The Debian package's build (feature `jemalloc`) allocates with jemalloc, which
/// returns what it frees to the kernel; see [`ioserve::jemalloc`].
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: ioserve::jemalloc::Jemalloc = ioserve::jemalloc::Jemalloc;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ioserve: {}", message(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once: the library's errors name
/// their cause in their own text ("cannot serve /srv: No such file or directory") and
/// also return it as their source, which anyhow's `{:#}` would print a second time.
fn message(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let words = cause.to_string();
        if text.contains(&words) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&words);
    }
    text
}

fn run() -> anyhow::Result<()> {
    let cli = Settings::parse();
    let config = Config::load(cli.clone())?;
    if cli.check_config {
        let report = ioserve::serve::check::report(&config)?;
        print!("{report}");
        println!("ioserve: the configuration is valid");
        return Ok(());
    }
    // Log lines go to stderr through a background writer, so a slow terminal or pipe
    // never stalls a worker; lines are dropped rather than blocking when it falls behind.
    let (writer, _flush_guard) = tracing_appender::non_blocking(std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    // A panic is a bug; it ends only the connection it happened in. Log it once, as
    // one line through the same logger, instead of the default hook's stderr text.
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(ToString::to_string).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let thread = std::thread::current();
        tracing::error!(thread = thread.name().unwrap_or("?"), %location, message, "panic");
    }));
    tracing::info!(
        pid = std::process::id(),
        "ioserve {} starting",
        ioserve::VERSION
    );
    raise_fd_limit();
    // SIGHUP merges the same command line with the config file as it is then.
    let server = Server::bind(&config)?.reload_with(Box::new(move || Config::load(cli.clone())));
    if let Err(error) = say_where(&server, &config) {
        // The old process's stdout, which a live upgrade's process inherits, may be
        // gone (its reader has what the old process printed): the upgrade goes on.
        if !server.started_by_upgrade() {
            return Err(error);
        }
        tracing::warn!("cannot print the listening addresses: {error:#}");
    }
    server.run()?;
    Ok(())
}

/// Prints where the server listens, on stdout.
fn say_where(server: &Server, config: &Config) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "ioserve: serving {} at {}://{}/ (strategy {}, {} worker{}{})",
        server.root().display(),
        if config.tls() { "https" } else { "http" },
        server.local_addr(),
        config.strategy.name(),
        config.workers,
        if config.workers == 1 { "" } else { "s" },
        match server.http3_addr() {
            Some(udp) => format!(", HTTP/3 on UDP {udp}"),
            None => String::new(),
        },
    )?;
    if let Some(addr) = server.redirect_addr() {
        writeln!(stdout, "ioserve: redirecting http://{addr}/ to https")?;
    }
    if let Some(addr) = server.metrics_addr() {
        writeln!(stdout, "ioserve: metrics at http://{addr}/metrics")?;
    }
    stdout.flush().context("cannot write to stdout")?;
    Ok(())
}

/// Raises the soft limit on open files to the hard limit, as nginx's
/// `worker_rlimit_nofile` and Go's runtime do: every connection and every cached open
/// file holds a descriptor, and Debian's default soft limit is 1024.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(error) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(%error, "cannot raise the open-file limit");
        }
    }
}
