//! `--check-config`: what a configuration would serve, checked without serving, as
//! `nginx -t` does: the root opened, the TLS files or the ACME settings and state
//! read, the authentication file parsed. Nothing is bound, created or ordered.

use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use crate::acme::certificate::{rfc3339, Certificate};
use crate::acme::client::CaHttp;
use crate::acme::schedule;
use crate::acme::store::{self, Store};
use crate::acme::AcmeSettings;
use crate::http::auth::Auth;
use crate::io::root::Root;
use crate::ops::config::Config;
use crate::serve::error::ServerError;
use crate::serve::tls;

/// Checks `config` and describes it, one setting group a line; the first problem is
/// the error.
pub fn report(config: &Config) -> Result<String, ServerError> {
    let mut out = String::new();
    let root =
        Root::open(&config.root, config.follow_symlinks).map_err(|source| ServerError::Root {
            path: config.root.clone(),
            source,
        })?;
    let scheme = if config.tls() { "https" } else { "http" };
    let _ = writeln!(out, "root        {}", root.path().display());
    let _ = writeln!(
        out,
        "listen      {scheme}://{}/ (strategy {}, {} workers)",
        config.listen,
        config.strategy.name(),
        config.workers
    );
    if let Some(addr) = config.redirect_http {
        let _ = writeln!(out, "redirect    http://{addr}/ to https");
    }
    if let Some(addr) = config.metrics_listen {
        let _ = writeln!(out, "metrics     http://{addr}/metrics");
    }
    if let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) {
        tls::load(cert, key)?;
        let _ = writeln!(out, "tls         {} with {}", cert.display(), key.display());
    }
    if let Some(acme) = config.acme() {
        describe_acme(&mut out, &acme)?;
    }
    if let Some(path) = &config.auth_file {
        Auth::load(path, &config.auth_realm)?;
        let _ = writeln!(
            out,
            "auth        {} (realm {:?})",
            path.display(),
            config.auth_realm
        );
    }
    Ok(out)
}

/// The ACME lines: the CA and how it validates, the state directory and what it holds.
fn describe_acme(out: &mut String, acme: &AcmeSettings) -> Result<(), ServerError> {
    CaHttp::new(acme.ca_root.as_deref()).map_err(ServerError::Acme)?;
    let _ = writeln!(out, "acme        {}", acme.domains.join(", "));
    let _ = writeln!(out, "  ca        {}", acme.directory);
    if let Some(root) = &acme.ca_root {
        let _ = writeln!(
            out,
            "  ca root   {} (beside the system's roots)",
            root.display()
        );
    }
    let _ = writeln!(out, "  challenge {}", acme.challenge.name());
    let _ = writeln!(
        out,
        "  profile   {}",
        acme.profile.as_deref().unwrap_or("the CA's default")
    );
    let _ = writeln!(
        out,
        "  contact   {}",
        acme.email.as_deref().unwrap_or("none")
    );
    let state = Store::new(&acme.state, &acme.directory);
    let _ = writeln!(
        out,
        "  state     {} ({})",
        acme.state.display(),
        state_directory(&acme.state).map_err(|source| ServerError::Acme(
            store::StoreError::Unwritable {
                dir: acme.state.clone(),
                source,
            }
            .into()
        ))?
    );
    let account = match state.account() {
        Ok(Some(_)) => "stored".to_string(),
        Ok(None) => "none yet: made at the first order".to_string(),
        Err(error) => format!("unreadable: {error}"),
    };
    let _ = writeln!(out, "  account   {account}");
    let certificate = match state.certificate(&acme.domains[0]) {
        Ok(Some(pem)) => match Certificate::from_pem(&pem) {
            Ok(certificate) if !certificate.covers(&acme.domains) => format!(
                "stored for {}, not every name: a new one is ordered at start",
                certificate.names.join(", ")
            ),
            Ok(certificate) if !certificate.valid_at(SystemTime::now()) => format!(
                "stored, expired {}: a new one is ordered at start",
                rfc3339(certificate.not_after)
            ),
            Ok(certificate) => format!(
                "valid until {}, renewed in the CA's window or from {}",
                rfc3339(certificate.not_after),
                rfc3339(schedule::one_third_left(
                    certificate.not_before,
                    certificate.not_after
                ))
            ),
            Err(error) => format!("unusable ({error}): a new one is ordered at start"),
        },
        Ok(None) => "none yet: ordered at start".to_string(),
        Err(error) => format!("unreadable: {error}"),
    };
    let _ = writeln!(out, "  cert      {certificate}");
    Ok(())
}

/// Whether the state directory can be written: an existing one is probed with a file
/// written and removed; a missing one needs its nearest existing parent to be a
/// directory.
fn state_directory(dir: &Path) -> std::io::Result<&'static str> {
    if dir.is_dir() {
        let probe = dir.join(".check-config-probe");
        store::write_atomic(&probe, b"")?;
        std::fs::remove_file(&probe)?;
        return Ok("writable");
    }
    let mut parent = dir.parent();
    while let Some(candidate) = parent {
        if candidate.exists() {
            return match candidate.is_dir() {
                true => Ok("made at start"),
                false => Err(std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", candidate.display()),
                )),
            };
        }
        parent = candidate.parent();
    }
    Ok("made at start")
}
