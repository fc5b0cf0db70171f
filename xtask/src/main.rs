//! Project automation, in Rust so that it runs wherever cargo does, on clap:
//! `cargo xtask --help` lists the tasks, `cargo xtask TASK --help` their options.
//!
//! ```text
//! cargo xtask ci                 every check CI runs: system packages, fmt, clippy,
//!                                module cycles, tests, the guests (numa, clock, tls, faults, arm64),
//!                                the aarch64 build, simd's scalar paths under Miri
//! cargo xtask packages           the Debian packages the checks need (ci's first step)
//! cargo xtask fuzz [SECONDS]     a short run of every cargo-fuzz target (nightly)
//! cargo xtask loadtest [--quick]  ioserve against nginx and Go's FileServer (wrk);
//!                                 --cold: hot requests beside cold downloads;
//!                                 --tls: over HTTPS; --h3: HTTP/3 against Caddy;
//!                                 --c100k: 100,000 connections held, against nginx
//! cargo xtask profile            ioserve and nginx under perf: flamegraphs, CPU s/GiB
//! cargo xtask numa-vm            numa in 2- and 4-node qemu guests
//! cargo xtask clock-vm           probe's clock checks under tsc, hpet and acpi_pm guests
//! cargo xtask arm64-vm           simd, numa, probe and ioserve on Debian's arm64 kernel
//! cargo xtask tls-vm             ioserve's kTLS on Debian's 6.1 kernel (tls.ko)
//! cargo xtask faults-vm          ioserve on a disk that returns EIO under a file (6.1, dm error)
//! cargo xtask systemd-vm         the live upgrade under systemd as PID 1 (MAINPID= followed)
//! cargo xtask c100k-vm           loadtest --c100k's 100,000 connections in a 6.1 guest
//! cargo xtask bench [--quick]    criterion benches + Go peers -> target/bench-report
//! cargo xtask bench-compare      criterion's latest run against a saved baseline
//! cargo xtask cross [--smoke]    aarch64 binaries and bench executables in a tarball
//! cargo xtask vmlinux [--btf F]  regenerate probe's vmlinux.h from the kernel's BTF
//! cargo xtask bpf [--check]      compile probe's BPF programs into its committed objects
//! cargo xtask dist [--check]     Debian packages of ioserve, numa, probe and timeserve
//! cargo xtask actionlint         lint .github/workflows (actionlint, shellcheck)
//! cargo xtask modules            no module cycle in any library crate (syn)
//! cargo xtask udpload [--quick]  SNTP servers under load: timeserve, chrony, Go (seed 002)
//! cargo xtask probe-overhead     dd under probe, strace -c and perf trace (as root)
//! cargo xtask hash-quality       simd's hash beside foldhash-quality and gxhash
//! cargo xtask browser [--docs]   ioserve's listing in headless Chromium (WebDriver, axe)
//! cargo xtask acme [--only NAME]  ioserve's ACME client against pebble (Let's Encrypt's test CA)
//! cargo xtask http3              ioserve's HTTP/3 with quic-go's and aioquic's clients, Chromium
//! ```
//!
//! The modules group the tasks by job: `ci` (the CI run and the checks only it makes,
//! probe's BPF objects, fuzzing, the workflows' lint), `browser` (ioserve's listing in
//! Chromium), `acme` (ioserve's ACME client against pebble), `guests` (the qemu
//! guests and what they share), `http3` (ioserve's HTTP/3 with other clients), `load`
//! (load tests), `bench` and `bench_compare` (criterion benches,
//! their report, the pull-request gate), `release` (aarch64 and cross builds, the
//! Debian packages with their man pages and completions); `util` holds what they
//! all use (running cargo and programs, cargo's target directory, Debian packages,
//! test-run totals, statistics, SVG charts), written once.

mod acme;
mod bench;
mod bench_compare;
mod browser;
mod ci;
mod guests;
mod http3;
mod load;
mod operations;
mod release;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::guests::{arm64_vm, c100k_vm, clock_vm, faults_vm, numa_vm, systemd_vm, tls_vm};
use crate::load::{loadtest, probe_overhead, udpload};
use crate::release::cross;
use crate::util::ioserve_process::IoserveBinary;
// The cross tarball carries the man pages and completions too (release/cross.rs).
pub(crate) use crate::release::dist::write_docs as dist;

/// `cargo xtask`: the command line, one subcommand per task, each with its own
/// `--help`.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Project automation: CI, benchmarks, load tests, guests, cross builds",
    disable_help_subcommand = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) task: Task,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Task {
    /// Every check CI runs: packages, fmt, clippy, tests, guests, aarch64, Miri
    ///
    /// cargo fmt --check; then, while the missing system packages, toolchains and Go
    /// programs install on a thread beside it (as root), clippy -D warnings and the
    /// module-cycle check (`cargo xtask modules`); actionlint on the GitHub workflows,
    /// the .deb packages (dist --check), cargo test for the whole workspace, the
    /// numa-vm, clock-vm and tls-vm guests, the browser, h2spec, testssl.sh and ACME
    /// (pebble) checks, the workspace built for aarch64, the arm64-vm guest (simd's
    /// tests run there, with AES and with SIMD_DISABLE=aes), and simd's scalar paths
    /// under Miri (nightly, installed when missing)
    Ci,
    /// Criterion benches and Go peers -> target/bench-report
    ///
    /// Run the criterion benches (and Go's sync.Map) and the read-strategy bench, then
    /// write target/bench-report/report.md (a table per group with the ratio of ours to
    /// the best peer), results.json and an SVG chart per group
    Bench(bench::Options),
    /// Criterion's latest run against a saved baseline; fails past a threshold
    ///
    /// Compare each benchmark's median in TARGET_DIR/criterion/<id>/new with the one
    /// saved by `cargo bench -- --save-baseline NAME`, print a table, and fail when one
    /// is slower by more than --threshold percent (the bench workflow's pull-request gate)
    BenchCompare(bench_compare::Options),
    /// aarch64 binaries and bench executables in a tarball
    ///
    /// Build ioserve, numa and the criterion bench executables for aarch64 (with cross
    /// when a container engine runs, else rustup target + gcc cross linker) into
    /// target/cross/ioserve-toolkit-aarch64.tar.gz with a run script
    Cross(cross::Options),
    /// A short run of every cargo-fuzz target (nightly)
    ///
    /// Run each cargo-fuzz target for SECONDS; needs nightly, installs cargo-fuzz when
    /// missing
    Fuzz {
        /// Seconds per target
        #[arg(default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        seconds: u64,
    },
    /// ioserve against nginx and Go's FileServer (wrk), and memory per connection
    ///
    /// ioserve (every strategy) against nginx and Go's FileServer with wrk on 127.0.0.1:
    /// 8 MiB and 4 KiB files at 100 connections, random 1 MiB ranges at 16; medians over
    /// rounds, ratios to nginx; then memory per connection with idle and downloading
    /// clients; writes target/loadtest/{report.md,results.json,chart.svg}
    Loadtest(loadtest::Args),
    /// ioserve and nginx under perf while wrk runs: flamegraphs and CPU s per GiB
    ///
    /// Build ioserve with frame pointers and line tables (in TARGET_DIR/profile/cargo),
    /// run the load test's 8 MiB and 4 KiB workloads against each server under `perf
    /// record -e cpu-clock -g`, fold the stacks with inferno into
    /// TARGET_DIR/profile/SERVER-{8MiB,4KiB}.svg and print CPU seconds per GiB and the
    /// frames with the most samples (also in summary.md); as root
    Profile(loadtest::profile::Options),
    /// SNTP servers under load: timeserve, chrony, Go (seed 002)
    ///
    /// SNTP servers under offered load on 127.0.0.1 (seed 002): timeserve with 1 and N
    /// SO_REUSEPORT sockets, chrony, the seed's Go server (1 and N); answered/s, loss,
    /// p50/p99 and the kernel's RcvbufErrors per step (medians of runs), into
    /// target/udpload/{report.md,results.json,chart.svg}
    Udpload(udpload::Args),
    /// dd under probe, strace -c and perf trace (as root)
    ///
    /// What tracing costs: dd bs=4k bare and under probe syscalls (count-only and
    /// --latency), strace -c and perf trace -s, interleaved rounds, median GB/s and
    /// ratio to bare; as root
    ProbeOverhead(probe_overhead::Options),
    /// Regenerate probe's vmlinux.h from the kernel's BTF
    ///
    /// Regenerate crates/probe/src/bpf/vmlinux.h (committed, so that building probe
    /// needs clang but not bpftool) from a BTF file; installs bpftool when missing
    Vmlinux {
        /// The BTF to dump
        #[arg(long, value_name = "PATH", default_value = "/sys/kernel/btf/vmlinux")]
        btf: PathBuf,
    },
    /// The simd hash's full quality suite beside foldhash-quality and gxhash
    ///
    /// Run simd's quality suite (avalanche at every key length to 128 and beyond, seed
    /// avalanche, bit independence, sparse keys with up to 3 bits set, appended zeros,
    /// cyclic keys, (key, seed) grids) on ours, foldhash's quality variant and gxhash,
    /// built for this CPU; print the table and write it to
    /// <target dir>/hash-quality/table.md
    HashQuality(ci::hash_quality::Options),
    /// Compile probe's BPF programs into its committed objects
    ///
    /// Compile crates/probe/src/bpf/*.bpf.c with clang (and libbpf's linker, through
    /// bpftool) for x86_64 and aarch64 into crates/probe/src/bpf/compiled/, which are
    /// committed so that building probe needs no clang; --check rebuilds them in a
    /// scratch directory and fails if they differ (part of ci)
    Bpf(ci::bpf::Options),
    /// Debian packages of ioserve, numa, probe and timeserve (cargo-deb)
    ///
    /// Build ioserve, ioserve-numa, ioserve-probe and timeserve .deb files with cargo-deb
    /// (installed when missing) from a release build: each with its man pages and bash,
    /// zsh and fish completions (the cli-docs crate), ioserve's with its systemd units
    /// and /etc/ioserve/ioserve.toml; into OUT, by default TARGET_DIR/debian
    Dist(release::dist::Options),
    /// Install the Debian packages the checks and tests need (apt, as root)
    ///
    /// What `cargo xtask ci` installs first, for a runner that runs some of its steps
    /// on their own (the arm64 workflow job): one list, in xtask/src/ci/mod.rs
    Packages,
    /// Lint .github/workflows with actionlint and shellcheck (installed when missing)
    ///
    /// Run actionlint (go install, when missing) on the GitHub workflows, with
    /// shellcheck (apt) on their run: scripts; any finding fails (part of ci)
    Actionlint,
    /// No module cycle in any library crate, counting a folder as one module
    ///
    /// Read each library crate of the workspace (syn) from its root along its `mod`
    /// declarations, collect which module uses which (use trees, paths in code and
    /// macro arguments, re-exports followed), and fail on a cycle at any level of the
    /// tree, a folder counting as one module and a mod.rs body as a module beside its
    /// children; each cycle is printed with one file:line per edge
    Modules,
    /// HTTP/2 conformance: h2spec (strict) against ioserve over TLS, every case passing
    ///
    /// Build ioserve (or take --ioserve), serve a small tree over HTTPS with a fresh
    /// self-signed certificate, and run h2spec -S -t -k (go install, when missing) against it;
    /// any failed or skipped case fails, and is named (part of ci)
    H2spec(IoserveBinary),
    /// TLS scan: testssl.sh against ioserve over HTTPS, no finding rated HIGH or CRITICAL
    ///
    /// Build ioserve (or take --ioserve), serve a small tree over HTTPS with a fresh
    /// self-signed certificate, run testssl.sh's full scan (Debian's testssl.sh, installed when
    /// missing) and read its JSON: a finding rated HIGH or CRITICAL fails and is
    /// printed, except the test certificate's own (no chain of trust, no revocation
    /// URI); the counts by severity are printed (part of ci)
    Testssl(IoserveBinary),
    /// ioserve's directory listing in headless Chromium (WebDriver, axe-core)
    ///
    /// Build ioserve, serve a fixture tree (sparse 4 GiB files, names that need
    /// escaping) and drive Debian's chromium through chromedriver with Selenium: the
    /// page renders, the Size header sorts both ways, the dark theme applies, a 390 px
    /// viewport has no horizontal scroll, axe-core finds no serious or critical
    /// violation; screenshots in TARGET_DIR/browser (part of ci)
    Browser(browser::Options),
    /// HTTP/3 with clients no one here wrote: quic-go, aioquic, Chromium over QUIC
    ///
    /// Build ioserve (or take --ioserve), serve a tree over HTTPS (and so HTTP/3) with a
    /// certificate from a test CA; a client on quic-go's http3 package (go build, its
    /// module committed) and one on aioquic (pip install under the target directory)
    /// each download 32 MiB byte-exact, a range, a 304 for its ETag, the listing, and
    /// 300 requests at once on one connection; headless Chromium forced onto QUIC loads
    /// the listing and a download, both over h3 (part of ci)
    Http3(http3::Options),
    /// ACME against pebble (Let's Encrypt's test CA)
    ///
    /// Build ioserve (or take --ioserve), install pebble and pebble-challtestsrv (go
    /// install, when missing) and run each scenario with its own pebble on fresh ports
    /// of 127.0.0.1: a first certificate by tls-alpn-01, by http-01 and with refused
    /// nonces (byte-exact verified download, expiry gauge, orders counter, state
    /// directory modes), a restart on the stored certificate, renewal of 60 s
    /// certificates for 3 minutes across a pebble restart, two replicas sharing a port
    /// and a state directory, the listing in headless Chromium trusting pebble's root,
    /// and bad input (an unreachable CA, a refused name, an unwritable state directory)
    Acme(acme::Options),
    /// ioserve's live upgrade (SIGUSR2) under load, from one build to another
    ///
    /// Serve a small tree from a copy of the old build (--ioserve, else the debug
    /// build), load it with wrk (--rate small requests per second) and --downloads
    /// rate-limited curl downloads, replace the binary with the new build (--to, else
    /// the ci-package profile's), send SIGUSR2 and wait for the old process to finish
    /// and exit: no refused, reset or failed request, every download byte-exact, the new
    /// build serving. Scenarios: plain (after two upgrades that fail, a binary that
    /// cannot run and a refused configuration), tls (HTTPS, downloads over HTTP/2),
    /// activation (systemd-socket-activate, MAINPID= on the notify socket); part of ci
    Upgrade(operations::upgrade::Options),
    /// Hours of mixed load on ioserve over HTTPS, its resources sampled
    ///
    /// wrk's keep-alive small files over HTTP/1.1, curl downloads over HTTP/2 resumed
    /// halfway, ranges, slow readers and listings, with a SIGHUP every minute (a new
    /// certificate every other one), for --duration; RSS, descriptors, threads and
    /// error counts every --interval into TARGET_DIR/soak/{soak.csv,soak.svg}; fails on
    /// any error, on growing descriptors or threads, or on RSS growing over 1 % per
    /// hour after the warm-up (a 2-minute run is part of ci)
    Soak(operations::soak::Options),
    /// numa in 2- and 4-node qemu guests
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG) with 2 and 4 NUMA nodes and
    /// check numa's binding, --hardware/--show and stat inside (installs
    /// qemu-system-x86 and busybox-static; part of ci)
    NumaVm(IoserveBinary),
    /// probe's clock checks in guests booted with tsc, hpet and acpi_pm (seed 004)
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG) three times, with
    /// clocksource=tsc (tsc=reliable), hpet and acpi_pm: probe clock and probe doctor
    /// must tell the vDSO from the syscall fallback, a static Go program's time.Now
    /// traced with probe syscalls --comm must make clock_gettime syscalls only under
    /// hpet and acpi_pm, CachedClock is timed against Instant::now, and probe's BPF
    /// programs must load and count exactly on that kernel (part of ci)
    ClockVm(clock_vm::Options),
    /// simd, numa, probe and ioserve on Debian's arm64 kernel (qemu TCG)
    ///
    /// Boot Debian's arm64 kernel under qemu-system-aarch64 (TCG, virt, -cpu max, two
    /// NUMA nodes) with static aarch64 builds: simd's tests natively and with
    /// SIMD_DISABLE=aes, numa-vm's checks, probe's programs loading and counting on
    /// that kernel, probe clock, and ioserve serving over loopback while probe judges
    /// sendfile zero-copy and read copying (part of ci)
    Arm64Vm,
    /// ioserve's kTLS on Debian's 6.1 kernel (qemu TCG)
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG), load tls.ko and the crypto
    /// modules, serve HTTPS with --ktls on under strace, and download with curl over
    /// TLS 1.2 and 1.3 with AES-GCM and ChaCha20-Poly1305: byte-exact downloads,
    /// /proc/net/tls_stat's sessions, mode="ktls" in the metrics, sendfile into the
    /// TLS socket (installs qemu-system-x86, busybox-static, curl, openssl, strace;
    /// part of ci)
    TlsVm(IoserveBinary),
    /// ioserve on a disk that fails under a file, on Debian's 6.1 kernel (qemu TCG)
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG) with ext4 on a RAM disk
    /// behind device-mapper, whose table then sends 64 KiB of one file and 4 KiB of a
    /// small one to the `error` target (EIO). Under every strategy, over HTTP/1.1,
    /// HTTPS and HTTP/2, curl downloads each beside a good file: each failing download
    /// ends short with exactly the file's first bytes, the good one is whole, the log
    /// names the file, byte and error once per response, the metric counts them, and
    /// the server lives on (installs qemu-system-x86, busybox-static, curl, openssl,
    /// dmsetup; part of ci)
    FaultsVm(IoserveBinary),
    /// The live upgrade under systemd as PID 1, on Debian's 6.1 kernel (qemu TCG)
    ///
    /// Boot Debian's kernel under qemu-system-x86_64 (TCG) with the host's systemd as
    /// PID 1 and the repository's units (the hardened ioserve.service, ioserve.socket);
    /// start the service, rename the --to build over /usr/bin/ioserve, send SIGUSR2 with
    /// the README's command: systemd must follow the new main PID (active, never
    /// restarted), the old process exit, the new build serve, `systemctl reload` reach
    /// it and `systemctl stop` stop it (part of ci)
    SystemdVm(systemd_vm::Options),
    /// The c100k scenario with every connection held, on Debian's 6.1 kernel (qemu TCG)
    ///
    /// `loadtest --c100k` in a guest of its own, where it may raise every limit that
    /// 100,000 connections need (a host's hard open-file limit can be below them):
    /// Debian's kernel under qemu-system-x86_64 (TCG, two CPUs) with this xtask, the
    /// release ioserve and the host's nginx; writes target/c100k-vm/c100k.{md,json}.
    /// The counts and the memory per connection are the guest kernel's and the
    /// servers'; its times are emulation's (installs qemu-system-x86, busybox-static,
    /// nginx)
    C100kVm(c100k_vm::Options),
    /// The c100k scenario inside c100k-vm's guest (run there by c100k-vm)
    #[command(hide = true)]
    C100kGuest(c100k_vm::GuestArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Ci => ci::run(),
        Task::Packages => ci::install_packages(),
        Task::Fuzz { seconds } => ci::fuzz::run(seconds),
        Task::NumaVm(binary) => numa_vm::run(&binary),
        Task::ClockVm(options) => clock_vm::run(&options),
        Task::Arm64Vm => arm64_vm::run().map(drop),
        Task::TlsVm(binary) => tls_vm::run(&binary),
        Task::FaultsVm(binary) => faults_vm::run(&binary),
        Task::SystemdVm(options) => systemd_vm::run(&options),
        Task::C100kVm(options) => c100k_vm::run(&options),
        Task::C100kGuest(args) => c100k_vm::in_guest(&args),
        Task::Vmlinux { btf } => ci::bpf::vmlinux(&btf),
        Task::Bpf(options) => ci::bpf::run(&options),
        Task::HashQuality(options) => ci::hash_quality::run(&options),
        Task::Dist(options) => release::dist::run(&options),
        Task::Actionlint => ci::workflows::lint(),
        Task::Modules => ci::modules::run(),
        Task::H2spec(binary) => ci::h2spec::run(&binary),
        Task::Testssl(binary) => ci::testssl::run(&binary),
        Task::Browser(options) => browser::run(&options),
        Task::Http3(options) => http3::run(&options),
        Task::Acme(options) => acme::run(&options),
        Task::Upgrade(options) => operations::upgrade::run(&options),
        Task::Soak(options) => operations::soak::run(&options),
        Task::ProbeOverhead(options) => probe_overhead::run(&options),
        Task::Bench(options) => bench::run(&options),
        Task::BenchCompare(options) => bench_compare::run(&options),
        Task::Cross(options) => cross::run(&options),
        Task::Loadtest(args) => loadtest::run(&args.resolve()),
        Task::Profile(options) => loadtest::profile::run(&options),
        Task::Udpload(args) => udpload::run(&args.resolve()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}
