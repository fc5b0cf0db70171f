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
//! everything in place; only the apt-get and rustup calls must not race. The Debian
//! packages and cargo-deb come first, and a [`Milestone`] says when: the BPF objects
//! and the packages' build need nothing else and start then, beside the toolchains
//! and Go's builds (on a fresh host these come after apt-get's two minutes, and they
//! can outlast clippy: 2026-11-30, with the Debian packages already installed, Miri's
//! sysroot, ntpd-rs and Go's programs took clippy's stage from 143 s to 240 s; on a
//! wholly fresh host, apt-get's 114 s included, 328 s against 165 s warm on the same
//! host). Miri's toolchain comes next, with a milestone of its own for the job that
//! runs Miri. The stages that could call rustup or Go start after
//! [`Provisioning::result`].

use std::sync::mpsc;

use anyhow::{bail, Result};

use crate::guests::Arch;
use crate::util::beside::Beside;
use crate::util::{ensure_packages, go_tool};

/// The installations under way, on a thread beside the stages.
pub(crate) struct Provisioning {
    packages: Milestone,
    all: Beside<()>,
}

/// A point the provisioning reaches, which a stage can wait for.
pub(crate) struct Milestone(mpsc::Receiver<()>);

impl Milestone {
    /// A milestone and the sender that marks it reached (dropped unsent when the
    /// provisioning fails before it).
    fn new() -> (mpsc::Sender<()>, Milestone) {
        let (reach, reached) = mpsc::channel();
        (reach, Milestone(reached))
    }

    /// Waits until it is reached; `false` when the provisioning ended without it.
    pub(crate) fn reached(&self) -> bool {
        self.0.recv().is_ok()
    }
}

/// Starts installing what the checks need, on a thread beside the stages; returns it
/// and the milestone of Miri's toolchain (nightly with Miri, and its sysroot built).
pub(crate) fn start() -> (Provisioning, Milestone) {
    let (packages_reached, packages) = Milestone::new();
    let (miri_reached, miri) = Milestone::new();
    let all = Beside::start("the provisioning", move || {
        provision(&packages_reached, &miri_reached)
    });
    (Provisioning { packages, all }, miri)
}

impl Provisioning {
    /// Waits for the Debian packages (every stage's, in one apt-get run) and cargo-deb;
    /// after that the provisioning calls no apt-get or dpkg.
    pub(crate) fn packages_installed(self) -> Result<Provisioning> {
        if self.packages.reached() {
            return Ok(self);
        }
        // They failed: the provisioning's error says how.
        self.all.result()?;
        bail!("the provisioning ended without installing the Debian packages")
    }

    /// Waits for everything: the toolchains, Go's programs, the HTTP/3 clients' modules
    /// and ntpd-rs too.
    pub(crate) fn result(self) -> Result<()> {
        self.all.result()
    }
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
/// working network) and cargo-deb's prebuilt binary (it was compiled here before, 270 s
/// of CPU beside clippy on a fresh 2-core host), then rustup's (Miri's toolchain
/// first) and Go's; ntpd-rs compiles on a thread of its own beside them, once apt-get
/// has its OpenSSL headers. Each milestone is marked as it is passed (a send fails
/// only when its stage is gone, after a failure elsewhere).
fn provision(packages: &mpsc::Sender<()>, miri: &mpsc::Sender<()>) -> Result<()> {
    ensure_packages(&every_package())?;
    crate::release::dist::ensure_cargo_deb()?;
    let _ = packages.send(());
    // ntpd-rs compiles (a core for about a minute) while the rest downloads.
    let ntpd_rs = Beside::start("ntpd-rs", super::ntpd_rs::ensure);
    super::ensure_miri()?;
    super::ensure_miri_sysroot()?;
    let _ = miri.send(());
    crate::release::aarch64::ensure_toolchain()?;
    super::hash_quality::ensure_toolchain(super::hash_quality::MSRV)?;
    super::workflows::actionlint()?;
    go_tool("h2spec", super::h2spec::H2SPEC)?;
    crate::acme::pebble::PebbleInstall::ensure()?;
    crate::http3::prefetch()?;
    ntpd_rs.result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_milestone_is_reached_when_marked_and_missed_when_its_sender_ends() {
        let (reach, milestone) = Milestone::new();
        let marked = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            reach.send(()).expect("the milestone waits");
        });
        assert!(milestone.reached());
        marked.join().unwrap();
        let (reach, milestone) = Milestone::new();
        std::thread::spawn(move || drop(reach)).join().unwrap();
        assert!(!milestone.reached());
    }

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
