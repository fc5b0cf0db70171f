//! ntpd-rs (the `ntpd` crate: `ntp-daemon` and `ntp-ctl`), the second NTS client
//! timeserve's tests synchronise from it. `cargo install`ed into cargo's bin
//! directory, where the tests look for it (`testdata::require_crate`).
//!
//! Built on the system's OpenSSL instead of its default aws-lc, whose C build took a
//! fresh 2-core host 170 s where this one takes 55 s (2026-11-29), and without its
//! PPS and DNS SRV support, which the tests do not use. A debug build: the tests
//! only need it to run.

use anyhow::Result;

use crate::util::{cargo, ensure_packages, step, which};

/// The crate and version (as `cargo install` takes them).
const CRATE: &str = "ntpd@1.9.0";

/// What its build needs from Debian (pkg-config is a compile package).
pub(crate) const PACKAGES: &[(&str, &str)] = &[("libssl-dev", "/usr/include/openssl/ssl.h")];

/// Installs ntp-daemon and ntp-ctl unless cargo's bin directory (or PATH) has them.
pub(crate) fn ensure() -> Result<()> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".cargo")))
        .map(|home| home.join("bin"));
    let installed = |program: &str| {
        which(program).is_some()
            || cargo_bin
                .as_ref()
                .is_some_and(|bin| bin.join(program).is_file())
    };
    if installed("ntp-daemon") && installed("ntp-ctl") {
        return Ok(());
    }
    ensure_packages(PACKAGES)?;
    step(
        &format!("cargo install {CRATE}"),
        cargo(&[
            "install",
            "--locked",
            "--debug",
            CRATE,
            "--no-default-features",
            "--features",
            "openssl,rustcrypto",
        ]),
    )
}
